//! The drawing surface of the charts: Noto Sans (from the `notosans` crate) parsed once, a plotters
//! bitmap backend that lays text out itself with `ab_glyph`, and the PNG encoding of a finished
//! canvas. No system font or font library is needed.

use super::*;

/// Regular and bold Noto Sans, parsed once.
pub(super) struct Faces {
    pub(super) regular: FontRef<'static>,
    pub(super) bold: FontRef<'static>,
}

/// Checks the output directory and loads the font.
pub(super) fn prepare(dir: &Path) -> Result<&'static Faces, ChartError> {
    if !dir.is_dir() {
        return Err(ChartError::NotADirectory(dir.to_path_buf()));
    }
    static FACES: OnceLock<Option<Faces>> = OnceLock::new();
    let faces = FACES.get_or_init(|| {
        let regular = FontRef::try_from_slice(notosans::REGULAR_TTF).ok()?;
        Some(Faces { regular, bold: FontRef::try_from_slice(notosans::BOLD_TTF).ok()? })
    });
    faces.as_ref().ok_or(ChartError::Font)
}

/// Draws one white `SIZE` canvas with `draw` and writes it to `path` as an 8-bit RGB PNG.
pub(super) fn render(
    path: PathBuf,
    faces: &'static Faces,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<PathBuf, ChartError> {
    let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
    let result: DrawResult = (|| {
        let root = Canvas { bitmap: BitMapBackend::with_buffer(&mut rgb, SIZE), faces }.into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
        drop(root);
        let mut png = png::Encoder::new(BufWriter::new(File::create(&path)?), SIZE.0, SIZE.1);
        png.set_color(png::ColorType::Rgb);
        png.set_depth(png::BitDepth::Eight);
        let mut writer = png.write_header()?;
        writer.write_image_data(&rgb)?;
        Ok(writer.finish()?)
    })();
    result.map(|()| path.clone()).map_err(|source| ChartError::Render { path, source })
}

/// A `BitMapBackend` that lays text out itself. (plotters 0.3.7's `ab_glyph` text drops each glyph's side
/// bearing, which spaces letters unevenly: "thr eads".) A text style's size is its em size in pixels.
pub(super) struct Canvas<'a> {
    pub(super) bitmap: BitMapBackend<'a>,
    pub(super) faces: &'static Faces,
}

impl Canvas<'_> {
    /// Coverage of each pixel of `text` laid out from (0, 0) at its top left (if `pixels`, else none), and the
    /// text's width and height.
    fn rasterize<S: BackendTextStyle>(&self, text: &str, style: &S, pixels: bool) -> (GlyphPixels, (i32, i32)) {
        let face = if matches!(style.style(), FontStyle::Bold) { &self.faces.bold } else { &self.faces.regular };
        let em = style.size() as f32;
        let font =
            face.as_scaled(face.units_per_em().map_or(PxScale::from(em), |u| (em * face.height_unscaled() / u).into()));
        let (mut x, mut prev, mut out) = (0f32, None, Vec::new());
        for id in text.chars().map(|c| font.glyph_id(c)) {
            x += prev.map_or(0.0, |p| font.kern(p, id));
            let glyph = id.with_scale_and_position(font.scale(), point(x, font.ascent()));
            if let Some(glyph) = font.outline_glyph(glyph).filter(|_| pixels) {
                let min = glyph.px_bounds().min;
                glyph.draw(|gx, gy, c| out.push((min.x as i32 + gx as i32, min.y as i32 + gy as i32, c)));
            }
            x += font.h_advance(id);
            prev = Some(id);
        }
        (out, (x.ceil() as i32, font.height().ceil() as i32))
    }
}

impl DrawingBackend for Canvas<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.bitmap.get_size()
    }

    fn ensure_prepared(&mut self) -> BackendResult {
        self.bitmap.ensure_prepared()
    }

    fn present(&mut self) -> BackendResult {
        self.bitmap.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> BackendResult {
        self.bitmap.draw_pixel(point, color)
    }

    fn estimate_text_size<S: BackendTextStyle>(&self, text: &str, style: &S) -> BackendResult<(u32, u32)> {
        let (_, (w, h)) = self.rasterize(text, style, false);
        Ok((w.max(0) as u32, h.max(0) as u32))
    }

    fn draw_text<S: BackendTextStyle>(&mut self, text: &str, style: &S, pos: BackendCoord) -> BackendResult {
        let (pixels, (w, h)) = self.rasterize(text, style, true);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Center => -w / 2,
            HPos::Right => -w,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        let (color, turn) = (style.color(), style.transform());
        for (x, y, coverage) in pixels {
            let (tx, ty) = turn.transform(x + dx, y + dy);
            let alpha = color.alpha * f64::from(coverage.clamp(0.0, 1.0));
            self.bitmap.draw_pixel((pos.0 + tx, pos.1 + ty), BackendColor { alpha, rgb: color.rgb })?;
        }
        Ok(())
    }
}
