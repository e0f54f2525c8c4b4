use leptos::prelude::*;

use crate::status::RedisStatusPanel;

/// The query page: where a user asks the upstream API through repoll.
#[component]
pub fn QueryPage() -> impl IntoView {
    view! {
        <section class="panel">
            <h1>"Query"</h1>
            <p>
                "repoll answers at once with what is known and keeps polling the slow upstream API for you."
            </p>
        </section>
        <RedisStatusPanel />
    }
}
