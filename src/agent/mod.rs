//! Built-in ACP agents: the scripted agent used for dry runs and as the runner's test
//! double (`ralph agent script FILE`).

pub(crate) mod script;
pub(crate) mod scripted;

pub(crate) use script::{Script, attempt_number};
pub(crate) use scripted::{Performance, serve_stdio};
