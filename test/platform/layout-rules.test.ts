/**
 * The layout rules of .dependency-cruiser.cjs (docs/decisions.md, "Code layout"): the real tree
 * passes `npm run lint:deps`, and a tree that breaks each rule on purpose fails it, naming the rule.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.ts';

const run = promisify(execFile);
const DEPCRUISE = path.join(REPO_ROOT, 'node_modules/.bin/depcruise');
const CONFIG = path.join(REPO_ROOT, '.dependency-cruiser.cjs');
const folders: string[] = [];
afterAll(() => Promise.all(folders.map((f) => rm(f, { recursive: true, force: true }))));

/** Runs depcruise with the project's rules in `cwd` over `dirs`; resolves with exit code and output. */
async function depcruise(cwd: string, dirs: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout } = await run(DEPCRUISE, [...dirs, '--config', CONFIG], { cwd });
    return { code: 0, output: stdout };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, output: e.stdout + e.stderr };
  }
}

/** A throwaway tree: `files` maps a path to its content; every imported file is created too. */
async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(path.join(tmpdir(), 'ldp-layout-'));
  folders.push(root);
  const tsconfig = { compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', allowImportingTsExtensions: true, noEmit: true } };
  await writeFile(path.join(root, 'tsconfig.json'), JSON.stringify(tsconfig));
  for (const [file, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), content);
  }
  return root;
}

/** `from` imports `to` (a file that exists and exports nothing else). */
function importing(from: string, to: string): Record<string, string> {
  const spec = path.relative(path.dirname(from), to);
  return { [from]: `import '${spec.startsWith('.') ? spec : `./${spec}`}';\n`, [to]: 'export const x = 1;\n' };
}

describe('layout rules (npm run lint:deps)', () => {
  it('the repository itself breaks none', async () => {
    const { code, output } = await depcruise(REPO_ROOT, ['api', 'workers', 'tasks', 'lib', 'bin', 'bench', 'test']);
    expect(output).toContain('no dependency violations found');
    expect(code).toBe(0);
  }, 60_000);

  const breaches: Array<[rule: string, files: Record<string, string>]> = [
    ['search-never-imports-another-service', importing('lib/search/query.ts', 'lib/aggregator/participants.ts')],
    ['signals-never-imports-another-service', importing('lib/signals/match-score.ts', 'lib/search/geo.ts')],
    ['aggregator-never-imports-another-service', importing('lib/aggregator/links.ts', 'lib/signals/people.ts')],
    ['platform-knows-no-domain', importing('lib/platform/db.ts', 'lib/network/config.ts')],
    ['network-imports-only-platform', importing('lib/network/items.ts', 'lib/search/indexer.ts')],
    ['clients-import-only-platform-and-network', importing('lib/clients/search-client.ts', 'lib/search/query.ts')],
    ['only-wiring-imports-context', importing('lib/search/engine.ts', 'lib/context.ts')],
    ['lib-imports-no-entry-points', importing('lib/aggregator/links.ts', 'api/http/errors.ts')],
    ['api-and-tasks-stay-apart', importing('api/aggregator/links.ts', 'tasks/bulk-upload-chunk.ts')],
    ['api-and-tasks-stay-apart', importing('tasks/bulk-upload-chunk.ts', 'api/http/errors.ts')],
    ['api-services-stay-apart', importing('api/search/search.ts', 'api/signals/items.ts')],
    ['nothing-imports-bench-or-test', importing('lib/search/query.ts', 'test/helpers/platform.ts')],
    ['no-circular', {
      'lib/aggregator/bulk/table.ts': "import './csv-table.ts';\nexport const a = 1;\n",
      'lib/aggregator/bulk/csv-table.ts': "import './table.ts';\nexport const b = 1;\n",
    }],
  ];

  it.each(breaches)('a tree breaking %s fails, naming the rule', async (rule, files) => {
    const root = await tree(files);
    const { code, output } = await depcruise(root, ['.']);
    expect(code).not.toBe(0);
    expect(output).toContain(`error ${rule}:`);
  }, 30_000);
});
