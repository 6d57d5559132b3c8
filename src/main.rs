//! The `toolq` binary: parse the command line, run it, map errors to exit codes.

fn main() {
    std::process::exit(toolq::cli::main());
}
