//! The font every picture draws with. It is compiled into the binary (the
//! `dejavu` crate) so plots render the same on a bare CI machine with no
//! fonts installed, and no system font library is linked.

use plotters::style::{register_font, FontStyle};
use std::sync::OnceLock;

/// The family plotters asks for by default (`FontFamily::SansSerif`), so
/// axis labels and captions all find the registered font.
pub const FAMILY: &str = "sans-serif";

/// Registers the font on first use. Registration is global in plotters, and
/// tests render from several threads at once, hence the once-only guard.
pub fn ensure() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        let normal = register_font(FAMILY, FontStyle::Normal, dejavu::sans::regular());
        let bold = register_font(FAMILY, FontStyle::Bold, dejavu::sans::bold());
        normal.is_ok() && bold.is_ok()
    });
    anyhow::ensure!(ok, "the embedded DejaVu Sans font could not be parsed");
    Ok(())
}
