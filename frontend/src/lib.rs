//! The wasm side of repoll: the server renders every page, and this crate takes over the
//! rendered DOM in the browser (hydration) so buttons, forms and live updates work.

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    // A panic in the browser would otherwise be an opaque "unreachable" trap.
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
