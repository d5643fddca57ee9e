/** Reading Prometheus text expositions (GET /metrics) in tests. */

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;

/** The value of the first sample of `name` whose labels include every pair of `labels`. */
export function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const match = SAMPLE.exec(line);
    if (!match || match[1] !== name) continue;
    const have = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(match[3]);
  }
  return undefined;
}

/**
 * What Prometheus would refuse or double-count in `text`: metric families declared twice
 * (`# TYPE`) and series (name and labels) given twice.
 */
export function duplicates(text: string): string[] {
  const seen = new Set<string>();
  const twice: string[] = [];
  for (const line of text.split('\n')) {
    const key = line.startsWith('# TYPE ') ? line : SAMPLE.exec(line)?.slice(1, 3).join('');
    if (key === undefined) continue;
    if (seen.has(key)) twice.push(key);
    seen.add(key);
  }
  return twice;
}
