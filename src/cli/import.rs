//! `driftwatch import`: an Argo CD notifications configuration, or Flux's notification
//! objects, converted to driftwatch's files.

use super::{BAD_INPUT, Format, NEEDS_HAND, OK, Path, PathBuf, Write};

/// `driftwatch import [--flux] FILE... --out DIR`: converts an Argo CD notifications
/// configuration (with `flux`, Flux notification-controller objects) and prints the
/// report.
pub fn import(
    files: &[PathBuf],
    dir: &Path,
    force: bool,
    flux: bool,
    format: Format,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let imported = if flux { crate::import::flux::import(files, dir, force) } else { crate::import::import(files, dir, force) };
    let report = match imported {
        Ok(r) => r,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Format::Text => write!(out, "{}", crate::import::render_report(&report))?,
    }
    Ok(if report.complete() { OK } else { NEEDS_HAND })
}
