//! `GET /api/v1/openapi.json`: the API described as OpenAPI 3.1, written by hand.
//!
//! Why by hand: four operations and two schemas do not justify a derive framework, and a
//! hand-written document says exactly what the handlers do (the API tests check that the
//! document lists every route).

use axum::Json;
use serde_json::{json, Value};

pub async fn document() -> Json<Value> {
    Json(spec())
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
    })
}

fn view_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Query" } } }
    })
}

/// The document itself.
pub fn spec() -> Value {
    let id_param = json!({
        "name": "id", "in": "path", "required": true,
        "description": "Query id: 32 lowercase hex characters (from the submit answer).",
        "schema": { "type": "string", "pattern": "^[0-9a-f]{32}$" }
    });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "repoll public API",
            "version": "1.0.0",
            "description": "Ask a slow asynchronous upstream API through repoll: the first answer comes at once with what is known (partial data when the upstream has some), and the final result is pushed over Server-Sent Events. The same query text (trimmed, inner whitespace collapsed) is the same query: concurrent askers share one chain of upstream polls."
        },
        "paths": {
            "/api/v1/queries": {
                "post": {
                    "operationId": "submitQuery",
                    "summary": "Submit a query (or join the identical one already running)",
                    "requestBody": {
                        "required": true,
                        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SubmitBody" } } }
                    },
                    "responses": {
                        "200": view_response("Final already: a fresh stored result (status done), or the task finished (or failed) within the first-answer budget."),
                        "202": view_response("Processing: a task was created or joined; partial data included when the upstream has some. Follow `Location` or the events stream."),
                        "400": error_response("Malformed JSON (code malformed_json)."),
                        "413": error_response("Body larger than 4 KiB (code payload_too_large)."),
                        "415": error_response("Content type is not application/json (code unsupported_media_type)."),
                        "422": error_response("The query breaks the input rules: empty, over 512 characters, or control, invisible or bidirectional-control characters (code invalid_query); or the body has no string `query` (code invalid_body)."),
                        "429": {
                            "description": "Rate limit of this client reached (code rate_limited).",
                            "headers": { "Retry-After": { "description": "Seconds to wait.", "schema": { "type": "integer" } } },
                            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                        },
                        "503": error_response("The queue (Redis) is unavailable (code unavailable).")
                    }
                }
            },
            "/api/v1/queries/{id}": {
                "get": {
                    "operationId": "getQuery",
                    "summary": "Current state of a query",
                    "parameters": [id_param.clone()],
                    "responses": {
                        "200": view_response("The current state."),
                        "404": error_response("Unknown or malformed id, or expired (code not_found)."),
                        "503": error_response("The queue (Redis) is unavailable (code unavailable).")
                    }
                }
            },
            "/api/v1/queries/{id}/events": {
                "get": {
                    "operationId": "queryEvents",
                    "summary": "Live state of a query as Server-Sent Events",
                    "description": "Sends the current state at once, then one event per change; each is an event named `state` whose data is a complete Query object and whose id is its `updated_at`. Heartbeat comment lines keep the connection open. The stream closes after the final state (done or failed). Every event is a full state, so on reconnect (with or without Last-Event-ID) the client simply receives the current state first.",
                    "parameters": [id_param],
                    "responses": {
                        "200": {
                            "description": "An event stream of `state` events.",
                            "content": { "text/event-stream": {
                                "schema": { "type": "string", "contentMediaType": "text/event-stream", "description": "`event: state`, `id: <updated_at>`, `data: <Query as JSON>` records, and `:` heartbeat comments." },
                                "itemSchema": { "$ref": "#/components/schemas/Query" }
                            } }
                        },
                        "404": error_response("Unknown or malformed id (code not_found)."),
                        "429": error_response("This client holds its maximum of live streams (code too_many_streams); the connection is closed."),
                        "503": error_response("The queue (Redis) is unavailable (code unavailable), or the server holds its maximum of live streams (code streams_full).")
                    }
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": { "200": { "description": "OpenAPI 3.1 document.", "content": { "application/json": {} } } }
                }
            }
        },
        "components": {
            "schemas": {
                "SubmitBody": {
                    "type": "object",
                    "required": ["query"],
                    "properties": {
                        "query": { "type": "string", "minLength": 1, "pattern": queue::query_pattern(), "description": "Unicode-normalised (NFC), trimmed and whitespace-collapsed; then 1 to 512 characters, without control characters (whitespace ones become spaces), invisible characters (zero-width, soft hyphen, BOM, ...) or bidirectional controls." },
                        "priority": { "type": "string", "enum": ["interactive", "background"], "default": "interactive", "description": "interactive: a person is waiting (claimed first). background: nobody is waiting (e.g. refreshing popular queries); claimed after interactive work, with at least one claim in ten while both wait; answered at once without waiting for a first poll. Joining a live task with interactive raises it." }
                    }
                },
                "Query": {
                    "type": "object",
                    "required": ["id", "query", "status", "partial", "result", "error", "polls", "next_poll_at", "created_at", "updated_at", "completed_at", "as_of"],
                    "properties": {
                        "id": { "type": "string", "pattern": "^[0-9a-f]{32}$" },
                        "query": { "type": "string", "description": "The normalised query." },
                        "status": { "type": "string", "enum": ["processing", "done", "failed"] },
                        "partial": { "description": "Latest partial data from the upstream while processing (JSON when the upstream sent JSON, else a string); null when none." },
                        "result": { "description": "Final data when done (JSON when the upstream sent JSON, else a string); null otherwise." },
                        "error": { "type": ["string", "null"], "description": "Plain reason when failed." },
                        "polls": { "type": "integer", "minimum": 0, "description": "Upstream answers \"still processing\" so far." },
                        "next_poll_at": { "type": ["integer", "null"], "description": "When the next poll is due (ms since the Unix epoch); null while a poll runs or when final." },
                        "created_at": { "type": "integer", "description": "ms since the Unix epoch." },
                        "updated_at": { "type": "integer", "description": "Last change, ms since the Unix epoch (the event id on the stream)." },
                        "completed_at": { "type": ["integer", "null"], "description": "When the result was stored (done only)." },
                        "as_of": { "type": "integer", "description": "Server clock when this state was read." }
                    }
                },
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": { "type": "string", "enum": ["malformed_json", "invalid_body", "invalid_query", "unsupported_media_type", "payload_too_large", "bad_request", "not_found", "rate_limited", "unavailable", "internal"] },
                                "message": { "type": "string" }
                            }
                        }
                    }
                }
            }
        }
    })
}
