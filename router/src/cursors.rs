//! (being written) Router-owned cursors.

pub struct CursorRegistry {}
