//! Built-in ACP agents: the scripted agent used for dry runs and as the runner test double.
