/** Runs the real `ldp` command (node bin/ldp.js) as a child process. */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const LDP = fileURLToPath(new URL('../../bin/ldp.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `ldp ...args` to completion with `env` added to a clean environment. */
export function runLdp(args: string[], env: Record<string, string>, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawnLdp(args, env);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => { stdout += d; });
    child.stderr!.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`ldp ${args.join(' ')} timed out\n${stderr}`)); }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Starts `ldp ...args` and returns the child (for long-running commands such as `start`). */
export function spawnLdp(args: string[], env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, [LDP, ...args], {
    cwd: REPO_ROOT,
    // `ldp worker`'s own port on any free one, so workers of test files running at once never collide.
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', LOG_LEVEL: 'warn', WORKER_METRICS_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Sends SIGTERM to `child` (unless it has already exited) and resolves with its exit code. */
export function stopChild(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });
}

/**
 * Starts `ldp ...args` and resolves, with the child and its stdout so far, once `ready(stdout)`
 * holds; rejects with its stderr if it exits first.
 */
export function spawnLdpUntil(args: string[], env: Record<string, string>, ready: (stdout: string) => boolean): Promise<{ child: ChildProcess; out: string }> {
  const child = spawnLdp(args, env);
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr!.on('data', (d) => { err += d; });
    child.stdout!.on('data', (d) => {
      out += d;
      if (ready(out)) resolve({ child, out });
    });
    child.on('exit', (code) => reject(new Error(`ldp ${args.join(' ')} exited with ${code}\n${err}`)));
  });
}
