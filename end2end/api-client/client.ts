// The repoll API client generated from the served OpenAPI document: `paths` and `components`
// come from end2end/generated/api.d.ts (openapi-typescript, written by
// scripts/tests/openapi-check.sh), the calls from openapi-fetch, typed by those paths. If the
// document stops describing what this file uses (a path, a field, a status value, the error
// shape), tsc refuses it; the Playwright spec tests/api_client.spec.ts makes the real calls.
import createClient from "openapi-fetch";
import type { components, paths } from "../generated/api";

export type Query = components["schemas"]["Query"];
export type SubmitBody = components["schemas"]["SubmitBody"];
export type ApiError = components["schemas"]["Error"];
export type ErrorCode = components["schemas"]["ErrorCode"];

/** A client of the public API at `baseUrl` (e.g. http://127.0.0.1:3117). */
export function apiClient(baseUrl: string) {
  return createClient<paths>({ baseUrl });
}

// Compile-time checks of the generated types against what the API promises (docs/api.md):
// a status is one of three values, an error carries a code from the documented list.
const statuses: Query["status"][] = ["processing", "done", "failed"];
const codes: ErrorCode[] = ["invalid_query", "not_found", "rate_limited"];
export const documented = { statuses, codes };
