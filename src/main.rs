#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: with 10,000 cached Tasks the controller's RSS is
/// far lower (glibc's arenas keep freed memory fragmented; docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = ralph::cli::Cli::parse();
    ralph::cli::init_tracing(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(ralph::cli::dispatch(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
