use leptos::prelude::*;

/// Unknown paths get a real 404 status on the server, not a 200 with an error text.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
            resp.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <section class="panel">
            <h1>"Not found"</h1>
            <p>"There is no page here. " <a href="/">"Back to the query page"</a></p>
        </section>
    }
}
