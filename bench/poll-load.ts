/**
 * The load generator of `bench:voice`, run as its own process so that the benchmark's other work
 * (job counts every 50 ms, RSS samples) never delays a send or the reading of an answer:
 * `node --import tsx bench/poll-load.ts '{"url", "headers", "rate", "seconds", "warmup"}'` prints `warm` once warmed up
 * (see `Options`), then polls `url` with
 * loadtest's constant rate — a request every 1/rate s on a free keep-alive connection (a new one
 * when all are busy), whether or not earlier answers have come, each latency from its scheduled
 * send (no coordinated omission) — and prints one JSON line: requests, rate achieved, non-2xx,
 * errors, latency p50/p95/p99/max in ms (exact percentiles over every answer), and a timeline: per
 * second of scheduled send, the answers, p50, p99 and max, to tell a few long stalls from a slow poll.
 */
import { loadTest, type LoadTestOptions, type LoadTestResult } from 'loadtest';

/**
 * `url`: what to poll; when absent, read from the first line of standard input once the warm-up
 * is done (so the process can start, and warm up, before the job to poll exists). `warmup`: polled
 * first at the same rate, answers discarded, so that neither this process's start (module loading,
 * JIT) nor its first connections count as the service's latency.
 */
interface Options { url?: string; headers: Record<string, string>; rate: number; seconds: number; warmup?: { url: string; seconds: number } }

// loadtest 8 answers a promise when called without a callback (its README); its typings predate that.
const runLoadTest = loadTest as unknown as (options: LoadTestOptions) => Promise<LoadTestResult>;

/** The `p`th percentile (nearest rank) of `values`, in ms with two decimals. */
function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return Number((sorted[rank] ?? NaN).toFixed(2));
}

const options = JSON.parse(process.argv[2]) as Options;
if (options.warmup) {
  await runLoadTest({ url: options.warmup.url, headers: options.headers, requestsPerSecond: options.rate, maxSeconds: options.warmup.seconds, agentKeepAlive: true, quiet: true });
}
process.stdout.write('warm\n');
const url = options.url ?? await new Promise<string>((resolve) => {
  let input = '';
  process.stdin.on('data', (chunk: Buffer) => {
    input += chunk.toString();
    if (input.includes('\n')) resolve(input.slice(0, input.indexOf('\n')).trim());
  });
});
process.stdin.destroy();
const latencies: number[] = [];
const started = Date.now();
/** Latencies by the second (from the start) in which each request was scheduled. */
const bySecond: number[][] = [];
let non2xx = 0;
let errors = 0;
const result = await runLoadTest({
  url, headers: options.headers, requestsPerSecond: options.rate, maxSeconds: options.seconds, agentKeepAlive: true, quiet: true,
  statusCallback: (_error: unknown, answer?: { requestElapsed: number; statusCode: number }) => {
    if (!answer) { errors++; return; }
    latencies.push(answer.requestElapsed);
    const second = Math.max(0, Math.floor((Date.now() - answer.requestElapsed - started) / 1000));
    (bySecond[second] ??= []).push(answer.requestElapsed);
    if (answer.statusCode < 200 || answer.statusCode > 299) non2xx++;
  },
});
process.stdout.write(`${JSON.stringify({
  target_rate: options.rate, seconds: options.seconds, requests: latencies.length + errors, rate_achieved: Math.round(result.rps),
  non_2xx: non2xx, errors,
  latency_ms: { p50: percentile(latencies, 50), p95: percentile(latencies, 95), p99: percentile(latencies, 99), max: percentile(latencies, 100) },
  /** This load generator's own CPU seconds (it shares the machine with what it measures). */
  cpu_seconds: Number(((process.cpuUsage().user + process.cpuUsage().system) / 1e6).toFixed(1)),
  timeline: Array.from(bySecond, (values = [], second) => ({ second, answers: values.length, p50: percentile(values, 50), p99: percentile(values, 99), max: percentile(values, 100) })),
})}\n`);
