//! Built-in ACP agents: the scripted agent used for dry runs and as the runner's test
//! double (`ralph agent script FILE`).

pub mod script;
pub mod scripted;

pub use script::{PermissionRequestStyle, Script, ScriptError, Step, attempt_number};
pub use scripted::{AgentError, Performance, serve, serve_stdio};
