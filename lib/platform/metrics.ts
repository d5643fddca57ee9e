/**
 * Prometheus metrics of one process (prom-client): the default process metrics, HTTP request
 * durations, graphile-worker jobs, and gauges the services add (read when scraped). One registry
 * per platform context, served at `GET /metrics` by every service of the process and by the port of
 * `ldp worker` (api/http/metrics.ts). A worker thread (`ldp start`) has a context and registry of its
 * own; the main thread merges the thread's `snapshot()` into its exposition at each scrape
 * (docs/decisions.md, "Metrics where the work is"). Names follow the Prometheus naming guide (base
 * units: seconds, bytes).
 */
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** A registry's metrics as plain data (`getMetricsAsJSON()`), which can cross a MessagePort. */
export type MetricsSnapshot = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

export interface Metrics {
  registry: Registry;
  /**
   * The Prometheus text exposition served at `/metrics`: this registry, plus the snapshots of the
   * sources `include` added, merged series by series (same name and labels: values added).
   */
  exposition(): Promise<string>;
  /**
   * Adds another isolate's metrics (a worker thread's `snapshot()`) to every later `exposition`.
   * `read` should resolve (with `[]` when the isolate is gone or does not answer), never reject.
   */
  include(read: () => Promise<MetricsSnapshot>): void;
  /**
   * This registry's metrics for a main thread to `include`: without the `process_*` series, which
   * are the whole process's and which the main thread reports itself.
   */
  snapshot(): Promise<MetricsSnapshot>;
  /** `http_request_duration_seconds{service, method, route, status}`: route is the template (`/v1/links/:id`). */
  httpRequestDuration: Histogram<'service' | 'method' | 'route' | 'status'>;
  /** `worker_jobs_total{task, outcome}`: outcome `success` or `error` (an error is retried until attempts run out). */
  workerJobs: Counter<'task' | 'outcome'>;
  /** `worker_job_duration_seconds{task, outcome}`. */
  workerJobDuration: Histogram<'task' | 'outcome'>;
  /**
   * Adds a gauge whose value(s) are read by `collect` at each scrape (e.g. from the database); a
   * second call with the same name keeps the first gauge. A failing `collect` leaves the gauge empty
   * for that scrape and never fails the scrape.
   */
  gauge<L extends string>(name: string, help: string, labelNames: readonly L[], collect: () => Promise<Array<{ labels?: Partial<Record<L, string>>; value: number }>>): void;
  /** The counter `name` of this registry, created on first call (later calls return the same one). */
  counter<L extends string>(name: string, help: string, labelNames?: readonly L[]): Counter<L>;
}

/**
 * Creates the registry of a process (or, with `thread`, of a worker thread: its default `nodejs_*`
 * series then carry the label `thread`, so they stay apart from the main thread's) with its default
 * metrics.
 */
export function createMetrics(options: { thread?: string } = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, ...(options.thread ? { labels: { thread: options.thread } } : {}) });
  const sources: Array<() => Promise<MetricsSnapshot>> = [];
  return {
    registry,
    async exposition() {
      if (!sources.length) return registry.metrics();
      const snapshots = await Promise.all([registry.getMetricsAsJSON(), ...sources.map((read) => read())]);
      // Summed, whatever each metric's cluster aggregator says ('omit', 'first', 'average' are
      // for copies of one process in a cluster; these are disjoint parts of one process).
      return AggregatorRegistry.aggregate(snapshots.map((metrics) => metrics.map((m) => ({ ...m, aggregator: 'sum' })))).metrics();
    },
    include(read) {
      sources.push(read);
    },
    async snapshot() {
      return (await registry.getMetricsAsJSON()).filter((m) => !m.name.startsWith('process_'));
    },
    httpRequestDuration: new Histogram({
      name: 'http_request_duration_seconds', help: 'HTTP request duration by service, route template and status.',
      labelNames: ['service', 'method', 'route', 'status'], registers: [registry],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    }),
    workerJobs: new Counter({
      name: 'worker_jobs_total', help: 'graphile-worker jobs run, by task and outcome.', labelNames: ['task', 'outcome'], registers: [registry],
    }),
    workerJobDuration: new Histogram({
      name: 'worker_job_duration_seconds', help: 'graphile-worker job duration, by task and outcome.', labelNames: ['task', 'outcome'],
      registers: [registry], buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300],
    }),
    counter<L extends string>(name: string, help: string, labelNames: readonly L[] = []) {
      return (registry.getSingleMetric(name) as Counter<L> | undefined)
        ?? new Counter<L>({ name, help, labelNames: [...labelNames], registers: [registry] });
    },
    gauge(name, help, labelNames, collect) {
      if (registry.getSingleMetric(name)) return;
      new Gauge({
        name, help, labelNames: [...labelNames], registers: [registry],
        async collect() {
          this.reset();
          try {
            for (const { labels, value } of await collect()) {
              if (labels) this.set(labels as never, value);
              else this.set(value);
            }
          } catch {
            // The scrape still answers; the gauge is absent this time.
          }
        },
      });
    },
  };
}
