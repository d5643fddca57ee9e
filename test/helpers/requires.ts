/**
 * Tests that need something outside the repository (the datasets and model in ../shared, Debian's
 * Chromium) skip with a reason a reader can check: the first absent path and how to get it.
 */
import { existsSync } from 'node:fs';

/** Debian's chromium, installed by .ci/run when missing. */
export const CHROMIUM = '/usr/bin/chromium';
export const NEEDS_CHROMIUM = ".ci/run installs Debian's chromium (apt-get install -y chromium)";
export const NEEDS_SHARED = '../shared (third-party data and model files) must sit next to the repository, as in CI';

/** '' when every path exists, else why a test cannot run: `<path> is absent; <how>`. */
export function absent(paths: string[], how: string): string {
  const missing = paths.find((p) => !existsSync(p));
  return missing ? `${missing} is absent; ${how}` : '';
}

/** `title`, with the skip reason appended when there is one (vitest prints it for the skipped block). */
export function titled(title: string, reason: string): string {
  return reason ? `${title} (skipped: ${reason})` : title;
}
