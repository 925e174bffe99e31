#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// jemalloc instead of glibc's malloc: glibc's arenas keep the memory freed after the
/// controller's first sync of 10,000 Tasks fragmented; jemalloc's background threads give
/// it back (docs/performance.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
