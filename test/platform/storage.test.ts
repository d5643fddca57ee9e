/**
 * Object storage (lib/storage.ts): the same behaviours against the filesystem and against a real
 * S3-compatible server (s3rver, started in-process on a free port) through the minio client.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as Minio from 'minio';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../lib/platform/config.ts';
import {
  createStorage, filesystemStorage, ObjectNotFoundError, s3Storage, S3_PART_SIZE, StorageKeyError, type ObjectStorage,
} from '../../lib/platform/storage.ts';
import { tempDir } from '../helpers/platform.ts';

// s3rver ships no type declarations: the part of its API the tests use.
interface S3rverServer {
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
  httpServer: Server;
}
const S3rver = createRequire(import.meta.url)('s3rver') as new (options: Record<string, unknown>) => S3rverServer;
const S3RVER_CREDENTIALS = { accessKey: 'S3RVER', secretKey: 'S3RVER' }; // the only pair s3rver accepts

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/**
 * A stream of `total` random bytes, generated lazily in 256 KiB chunks (only when the consumer asks
 * for more) and hashed on the way. When `probe` is given, it runs once `probe.at` bytes have been
 * produced, while the put is still in progress; `failAt` makes the source error at that point.
 */
function generated(total: number, options: { hash?: Hash; probe?: { at: number; run: () => Promise<void> }; failAt?: number } = {}): Readable {
  async function* chunks() {
    const CHUNK = 256 * 1024;
    let produced = 0;
    let probed = false;
    while (produced < total) {
      if (options.probe && !probed && produced >= options.probe.at) {
        probed = true;
        await options.probe.run();
      }
      if (options.failAt !== undefined && produced >= options.failAt) throw new Error('source failed mid-stream');
      const chunk = randomBytes(Math.min(CHUNK, total - produced));
      options.hash?.update(chunk);
      produced += chunk.length;
      yield chunk;
    }
  }
  return Readable.from(chunks(), { objectMode: false });
}

interface Backend {
  storage: ObjectStorage;
  /** Bytes the backend has received so far for puts that are still in progress. */
  bytesInFlight(key: string): Promise<number>;
}

const BIG = 20 * 1024 * 1024; // more than two S3 parts
const PROBE_AT = 17 * 1024 * 1024; // by then at least two parts (16 MiB) have gone up

/** The behaviours every ObjectStorage must have. */
function storageBehaviours(backend: () => Backend) {
  it('puts, stats, gets and deletes strings, buffers and streams', async () => {
    const { storage } = backend();
    expect(await storage.put('reports/a.csv', 'name,phone\n', { contentType: 'text/csv' })).toEqual({ key: 'reports/a.csv', size: 11 });
    expect(await storage.stat('reports/a.csv')).toEqual({ key: 'reports/a.csv', size: 11 });
    expect((await readAll(await storage.get('reports/a.csv'))).toString()).toBe('name,phone\n');

    const bytes = randomBytes(1000);
    expect(await storage.put('uploads/b.bin', bytes)).toEqual({ key: 'uploads/b.bin', size: 1000 });
    expect((await readAll(await storage.get('uploads/b.bin'))).equals(bytes)).toBe(true);

    expect(await storage.put('uploads/c.txt', Readable.from(['Zoë, ', 'अनीता'].map((s) => Buffer.from(s))))).toEqual({ key: 'uploads/c.txt', size: Buffer.byteLength('Zoë, अनीता') });
    expect((await readAll(await storage.get('uploads/c.txt'))).toString()).toBe('Zoë, अनीता');

    expect(await storage.put('empty', '')).toEqual({ key: 'empty', size: 0 });
    expect((await readAll(await storage.get('empty'))).length).toBe(0);

    await storage.put('reports/a.csv', 'replaced');
    expect((await readAll(await storage.get('reports/a.csv'))).toString()).toBe('replaced');

    await storage.delete('reports/a.csv');
    expect(await storage.stat('reports/a.csv')).toBeNull();
    await expect(storage.get('reports/a.csv')).rejects.toBeInstanceOf(ObjectNotFoundError);
    await expect(storage.delete('reports/a.csv')).resolves.toBeUndefined(); // already gone: not an error
  });

  it('get of a missing key throws ObjectNotFoundError; stat answers null', async () => {
    const { storage } = backend();
    await expect(storage.get('never/written.csv')).rejects.toThrow(ObjectNotFoundError);
    expect(await storage.stat('never/written.csv')).toBeNull();
    // A key that is only a prefix of another object is not an object.
    await storage.put('prefix/only/child.txt', 'x');
    await expect(storage.get('prefix/only')).rejects.toThrow(ObjectNotFoundError);
    expect(await storage.stat('prefix/only')).toBeNull();
    await expect(storage.delete('prefix/only')).resolves.toBeUndefined();
    expect(await storage.stat('prefix/only/child.txt')).toEqual({ key: 'prefix/only/child.txt', size: 1 });
  });

  it('scans an object\'s bytes in order, chunk by chunk; a missing key throws ObjectNotFoundError when scanned', async () => {
    const { storage } = backend();
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    await storage.put('scan/a.bin', bytes);
    const chunks: Buffer[] = [];
    // A chunk may be reused for the next one: a pass keeps a copy of what it keeps.
    for await (const chunk of storage.scan('scan/a.bin')) chunks.push(Buffer.from(chunk));
    expect(chunks.length).toBeGreaterThan(1);
    expect(Buffer.concat(chunks).equals(bytes)).toBe(true);
    await expect((async () => { for await (const _ of storage.scan('never/written.bin')) { /* nothing */ } })()).rejects.toThrow(ObjectNotFoundError);
  });

  it('streams a multi-megabyte body through without holding it whole, and the object appears only when complete', async () => {
    const { storage, bytesInFlight } = backend();
    const hash = createHash('sha256');
    let seen: { inFlight: number; stat: unknown; get: unknown } | undefined;
    const put = storage.put('big/upload.bin', generated(BIG, {
      hash,
      probe: {
        at: PROBE_AT,
        run: async () => {
          seen = {
            inFlight: await bytesInFlight('big/upload.bin'),
            stat: await storage.stat('big/upload.bin'),
            get: await storage.get('big/upload.bin').then(() => 'found', (err) => err),
          };
        },
      },
    }));
    expect(await put).toEqual({ key: 'big/upload.bin', size: BIG });
    // While the source was still producing, most of what it had produced was already stored...
    expect(seen!.inFlight).toBeGreaterThanOrEqual(2 * S3_PART_SIZE);
    // ...yet the object did not exist.
    expect(seen!.stat).toBeNull();
    expect(seen!.get).toBeInstanceOf(ObjectNotFoundError);

    expect(await storage.stat('big/upload.bin')).toEqual({ key: 'big/upload.bin', size: BIG });
    const stored = createHash('sha256');
    let size = 0;
    for await (const chunk of await storage.get('big/upload.bin')) {
      stored.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    expect(size).toBe(BIG);
    expect(stored.digest('hex')).toBe(hash.digest('hex'));
  });

  it('while an object is being replaced, readers get the whole previous version', async () => {
    const { storage } = backend();
    const previous = randomBytes(3 * 1024 * 1024);
    await storage.put('replace/me.bin', previous);
    let during: string | undefined;
    await storage.put('replace/me.bin', generated(BIG, {
      probe: { at: PROBE_AT, run: async () => { during = sha256(await readAll(await storage.get('replace/me.bin'))); } },
    }));
    expect(during).toBe(sha256(previous));
    expect(await storage.stat('replace/me.bin')).toEqual({ key: 'replace/me.bin', size: BIG });
  });

  it('a source that fails mid-stream rejects the put and stores nothing (an older version stays)', async () => {
    const { storage } = backend();
    await expect(storage.put('failed/new.bin', generated(BIG, { failAt: 10 * 1024 * 1024 }))).rejects.toThrow('source failed mid-stream');
    expect(await storage.stat('failed/new.bin')).toBeNull();

    await storage.put('failed/old.bin', 'version 1');
    await expect(storage.put('failed/old.bin', generated(BIG, { failAt: 12 * 1024 * 1024 }))).rejects.toThrow('source failed mid-stream');
    expect((await readAll(await storage.get('failed/old.bin'))).toString()).toBe('version 1');
    // A failure before the first part is complete, too.
    await expect(storage.put('failed/old.bin', generated(BIG, { failAt: 1024 * 1024 }))).rejects.toThrow('source failed mid-stream');
    expect((await readAll(await storage.get('failed/old.bin'))).toString()).toBe('version 1');
  });

  const badKeys = [
    '', '.', '..', '../x', 'a/../../b', 'a/..', '/etc/passwd', 'a//b', 'a/', 'a/./b', './a',
    'a\\b', '..\\..\\x', 'a\u0000b', '%2e%2e/x', 'a/%2e%2e/b', 'a b', 'naïve.csv', 'a?b', 'a#b', 'a:b',
    'x'.repeat(256), `${'abcd/'.repeat(205)}x`,
  ];

  it('rejects path traversal and malformed keys in every operation', async () => {
    const { storage } = backend();
    for (const key of badKeys) {
      const label = JSON.stringify(key.slice(0, 40));
      await expect(storage.put(key, 'x'), label).rejects.toBeInstanceOf(StorageKeyError);
      await expect(storage.get(key), label).rejects.toBeInstanceOf(StorageKeyError);
      await expect(storage.stat(key), label).rejects.toBeInstanceOf(StorageKeyError);
      await expect(storage.delete(key), label).rejects.toBeInstanceOf(StorageKeyError);
    }
  });

  it('lists every complete object with its size, and no deleted one', async () => {
    const { storage } = backend();
    await storage.put('list/a.csv', 'abc');
    await storage.put('list/deep/er/b.bin', randomBytes(10));
    await storage.put('list/gone', 'x');
    await storage.delete('list/gone');
    const listed = new Map<string, number>();
    for await (const o of storage.list()) listed.set(o.key, o.size);
    expect(listed.get('list/a.csv')).toBe(3);
    expect(listed.get('list/deep/er/b.bin')).toBe(10);
    expect(listed.has('list/gone')).toBe(false);
    expect(listed.has('list/deep')).toBe(false);
    for (const [key, size] of listed) expect(await storage.stat(key), key).toEqual({ key, size });
  });

  it('treats dots inside a segment as ordinary characters', async () => {
    const { storage } = backend();
    for (const key of ['a/..b/c', 'a/b../c', '...', '.hidden', 'v1.2/report.final.csv', 'A-Z_0-9/x']) {
      await storage.put(key, key);
      expect((await readAll(await storage.get(key))).toString(), key).toBe(key);
    }
  });
}

describe('filesystem storage', () => {
  let dir: string;
  let root: string;
  let storage: ObjectStorage;
  beforeAll(async () => {
    dir = await tempDir('ldp-storage-');
    root = path.join(dir, 'objects');
    storage = filesystemStorage(root);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  async function partialBytes(folder: string): Promise<number> {
    const names = await readdir(folder).catch(() => [] as string[]);
    const sizes = await Promise.all(names.filter((n) => n.endsWith('.partial')).map((n) => stat(path.join(folder, n)).then((s) => s.size)));
    return sizes.reduce((a, b) => a + b, 0);
  }

  storageBehaviours(() => ({
    storage,
    bytesInFlight: (key) => partialBytes(path.dirname(path.join(root, key))),
  }));

  it('stores objects as files under the root, and leaves no temporary file behind after a failure', async () => {
    await storage.put('a/..b/c', 'inside');
    expect(await readFile(path.join(root, 'a', '..b', 'c'), 'utf8')).toBe('inside');
    await expect(storage.put('tmp-check/x.bin', generated(BIG, { failAt: 4 * 1024 * 1024 }))).rejects.toThrow('source failed');
    expect(await readdir(path.join(root, 'tmp-check'))).toEqual([]);
    expect(storage.location).toBe(`filesystem:${root}`);
  });

  it('does not list the temporary file of a put in progress', async () => {
    await mkdir(path.join(root, 'listing'), { recursive: true });
    await writeFile(path.join(root, 'listing', `.${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}.partial`), 'half');
    await storage.put('listing/done.csv', 'whole');
    const keys: string[] = [];
    for await (const o of storage.list()) if (o.key.startsWith('listing/')) keys.push(o.key);
    expect(keys).toEqual(['listing/done.csv']);
  });

  it('never touches files outside the root', async () => {
    const outside = path.join(dir, 'x');
    await writeFile(outside, 'sentinel');
    await mkdir(path.join(dir, 'etc'), { recursive: true });
    for (const key of ['../x', 'a/../../x', '..\\x', '%2e%2e/x']) {
      await expect(storage.put(key, 'overwritten')).rejects.toBeInstanceOf(StorageKeyError);
      await expect(storage.delete(key)).rejects.toBeInstanceOf(StorageKeyError);
    }
    expect(await readFile(outside, 'utf8')).toBe('sentinel');
    expect(existsSync(path.join(root, '%2e%2e'))).toBe(false);
  });

  it('is what the configuration selects when S3_ENDPOINT is unset', async () => {
    const selected = await createStorage(loadConfig({ DATA_DIR: dir }));
    expect(selected.location).toBe(`filesystem:${path.join(dir, 'objects')}`);
  });
});

describe('S3 storage against a real S3-compatible server (s3rver)', () => {
  let dir: string;
  let server: S3rverServer;
  let endpoint: string;
  let storage: ObjectStorage;
  let client: Minio.Client;
  /** Bytes of the UploadPart and PutObject requests per key that the server has answered. */
  const received = new Map<string, number>();

  beforeAll(async () => {
    dir = await tempDir('ldp-s3rver-');
    server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir });
    const { port } = await server.run();
    // Observes without touching the body: counts each PUT (object or part) once the server has answered it.
    server.httpServer.on('request', (req: IncomingMessage, res: ServerResponse) => {
      const key = decodeURIComponent(new URL(req.url!, 'http://x').pathname.split('/').slice(2).join('/'));
      if (req.method === 'PUT') res.on('finish', () => received.set(key, (received.get(key) ?? 0) + Number(req.headers['content-length'] ?? 0)));
    });
    endpoint = `http://127.0.0.1:${port}`;
    storage = await s3Storage({ endpoint, ...S3RVER_CREDENTIALS, bucket: 'ldp', region: 'us-east-1' });
    client = new Minio.Client({ endPoint: '127.0.0.1', port, useSSL: false, ...S3RVER_CREDENTIALS, pathStyle: true });
  });
  afterAll(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  storageBehaviours(() => ({ storage, bytesInFlight: async (key) => received.get(key) ?? 0 }));

  it('created the bucket, and several processes starting together all get it', async () => {
    expect(await client.bucketExists('ldp')).toBe(true);
    const racing = await Promise.all([1, 2, 3].map(() => s3Storage({ endpoint, ...S3RVER_CREDENTIALS, bucket: 'race', region: 'us-east-1' })));
    expect(racing.map((s) => s.location)).toEqual(Array(3).fill(`s3:${endpoint}/race`));
    expect(await client.bucketExists('race')).toBe(true);
  });

  it('records the content type, for single and multipart puts', async () => {
    await storage.put('typed/small.csv', 'a,b\n', { contentType: 'text/csv' });
    await storage.put('typed/big.bin', generated(S3_PART_SIZE + 1000), { contentType: 'application/octet-stream' });
    expect((await client.statObject('ldp', 'typed/small.csv')).metaData['content-type']).toBe('text/csv');
    expect((await client.statObject('ldp', 'typed/big.bin')).metaData['content-type']).toBe('application/octet-stream');
    expect((await client.statObject('ldp', 'typed/big.bin')).size).toBe(S3_PART_SIZE + 1000);
  });

  it('fails loudly with unknown credentials', async () => {
    // s3rver checks the access key id of SigV4 requests, not their signature.
    await expect(s3Storage({ endpoint, accessKey: 'NOT-A-KEY', secretKey: 'S3RVER', bucket: 'ldp', region: 'us-east-1' }))
      .rejects.toThrow('Valid and authorized credentials required');
  });

  it('is what the configuration selects when S3_ENDPOINT is set', async () => {
    const selected = await createStorage(loadConfig({
      DATA_DIR: dir, S3_ENDPOINT: endpoint, S3_ACCESS_KEY: 'S3RVER', S3_SECRET_KEY: 'S3RVER', S3_BUCKET: 'configured',
    }));
    expect(selected.location).toBe(`s3:${endpoint}/configured`);
    await selected.put('k', 'v');
    expect((await readAll(await client.getObject('configured', 'k'))).toString()).toBe('v');
  });
});
