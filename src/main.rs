//! The `lockrun` binary: everything lives in the library; see `app::main`.

fn main() -> std::process::ExitCode {
    lockrun::app::main()
}
