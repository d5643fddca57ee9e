/**
 * How deep pages of search (`/v1/search`, `/v1/search/flat`) and discover reach (review of issue
 * 29; docs/decisions.md "Trust II"): at most MAX_PAGE_DEPTH rows (offset + limit), so that a deep
 * offset never makes the search engine rank, or a query walk, more rows than that. The spec lets
 * offset be any safe integer: a page reaching past the depth is cut there, one starting past it is
 * empty; meta.total still counts every match.
 */

export const MAX_PAGE_DEPTH = 10_000;

/** How many rows of a page of `limit` rows at `offset` lie within MAX_PAGE_DEPTH (0 past it). */
export function rowsWithinDepth(offset: number, limit: number): number {
  return Math.max(0, Math.min(limit, MAX_PAGE_DEPTH - offset));
}
