/**
 * Object storage for uploads and reports: the filesystem under `<DATA_DIR>/objects` by default,
 * S3/MinIO through the `minio` client when S3_ENDPOINT is set. Both stream in and out, so no
 * object is ever held whole in memory, and an object appears only once it is complete.
 *
 * Object keys are `/`-separated segments of `[A-Za-z0-9._-]` (at most 255 characters each, 1024 in
 * all: S3's limit); `.`/`..` segments, empty segments, absolute keys and anything else that could
 * escape the root are rejected (StorageKeyError). Keys are never URL-decoded: `%` is simply not in
 * the alphabet.
 */
import { createWriteStream } from 'node:fs';
import { chmod, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import type { Config } from './config.ts';
import { mkdirPrivate, PRIVATE_FILE_MODE } from './private-files.ts';

export interface ObjectInfo {
  key: string;
  /** Size in bytes. */
  size: number;
}

export interface ObjectStorage {
  /** Human-readable location, e.g. `filesystem:/srv/ldp/objects` or `s3:http://minio:9000/ldp`. */
  readonly location: string;
  /**
   * Stores `body` under `key`, replacing any object there; the object appears only once complete.
   * A stream is consumed chunk by chunk; when it errors, the error is rethrown and nothing is stored.
   * @throws StorageKeyError
   */
  put(key: string, body: Readable | Buffer | string, options?: { contentType?: string }): Promise<ObjectInfo>;
  /** Streams the object. @throws ObjectNotFoundError, StorageKeyError */
  get(key: string): Promise<Readable>;
  /**
   * The object's bytes in order, for a pass that keeps no chunk (it copies what it keeps): a
   * chunk is valid only until the next one is asked for, as the filesystem reads them all into
   * one buffer. A stream allocates a buffer per read, which stays allocated until V8's next
   * collection; a pass that parses nothing (CSV encoding detection: 32 MB in ~60 ms) causes none,
   * so a 32 MB file left ~25 MB of the worker's RSS behind for good (issue 17).
   * @throws ObjectNotFoundError, StorageKeyError (when iterated)
   */
  scan(key: string): AsyncIterable<Buffer>;
  /** Size of the object, or null when there is none. @throws StorageKeyError */
  stat(key: string): Promise<ObjectInfo | null>;
  /** Deletes the object; deleting a missing object is not an error. @throws StorageKeyError */
  delete(key: string): Promise<void>;
  /**
   * Every complete object (an unfinished put is not one), keys in no promised order, listed as
   * they are found: an object put or deleted during the listing may or may not be in it (backups).
   */
  list(): AsyncIterable<ObjectInfo>;
}

/** A key that is malformed or would escape the storage root. */
export class StorageKeyError extends Error {
  name = 'StorageKeyError';
}

export class ObjectNotFoundError extends Error {
  name = 'ObjectNotFoundError';
}

const SEGMENT = /^[A-Za-z0-9._-]{1,255}$/;

/** Returns `key` when it is a safe object key. @throws StorageKeyError */
export function assertObjectKey(key: string): string {
  const segments = key.split('/');
  const bad = key.length === 0 || key.length > 1024
    || segments.some((s) => s === '.' || s === '..' || !SEGMENT.test(s));
  if (bad) throw new StorageKeyError(`invalid object key: ${JSON.stringify(key.slice(0, 100))}`);
  return key;
}

/** Bytes per read of `scan` on the filesystem (one buffer, so larger than a stream's 64 KiB: fewer reads). */
const SCAN_CHUNK_BYTES = 256 * 1024;

/** The name of a filesystem put's temporary file (never an object of its own). */
const PARTIAL = /^\.[0-9a-f-]{36}\.partial$/;

/** Filesystem errors that mean "there is no object at this key". */
const absent = (err: unknown) => ['ENOENT', 'ENOTDIR', 'EISDIR'].includes((err as NodeJS.ErrnoException).code ?? '');

/**
 * Filesystem storage rooted at `root`. A put streams into a hidden temporary file beside the target,
 * flushed to disk, then renamed into place (atomic on POSIX), so readers see the old object or the
 * whole new one. Directories it creates are 0700 and objects 0600 (lib/platform/private-files.ts).
 * Unlike S3, a key cannot be both an object and a "folder" (`a` and `a/b`): such a put fails with
 * the filesystem's error.
 */
export function filesystemStorage(root: string): ObjectStorage {
  const base = path.resolve(root);
  const resolve = (key: string) => {
    const file = path.resolve(base, assertObjectKey(key));
    if (!file.startsWith(base + path.sep)) throw new StorageKeyError(`object key escapes the storage root: ${key}`);
    return file;
  };
  /** Opens the object's file. @throws ObjectNotFoundError, StorageKeyError */
  const openObject = async (key: string) => {
    const file = resolve(key);
    // Open first, then check: the object cannot vanish between the check and the read.
    const handle = await open(file, 'r').catch((err) => {
      if (absent(err)) throw new ObjectNotFoundError(`no object ${key}`);
      throw err;
    });
    if (!(await handle.stat()).isFile()) {
      await handle.close();
      throw new ObjectNotFoundError(`no object ${key}`);
    }
    return handle;
  };
  return {
    location: `filesystem:${base}`,
    async put(key, body) {
      const file = resolve(key);
      await mkdirPrivate(path.dirname(file));
      const tmp = path.join(path.dirname(file), `.${randomUUID()}.partial`);
      let size = 0;
      const count = new Transform({ transform(chunk, _enc, done) { size += chunk.length; done(null, chunk); } });
      const source = body instanceof Readable ? body : Readable.from([typeof body === 'string' ? Buffer.from(body) : body]);
      try {
        await pipeline(source, count, createWriteStream(tmp, { flush: true, mode: PRIVATE_FILE_MODE }));
        await chmod(tmp, PRIVATE_FILE_MODE);
        await rename(tmp, file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
      return { key, size };
    },
    async get(key) {
      return (await openObject(key)).createReadStream();
    },
    async *scan(key) {
      const handle = await openObject(key);
      try {
        const buffer = Buffer.allocUnsafe(SCAN_CHUNK_BYTES);
        for (;;) {
          const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
          if (bytesRead === 0) return;
          yield buffer.subarray(0, bytesRead);
        }
      } finally {
        await handle.close();
      }
    },
    async stat(key) {
      try {
        const info = await stat(resolve(key));
        return info.isFile() ? { key, size: info.size } : null;
      } catch (err) {
        if (absent(err)) return null;
        throw err;
      }
    },
    async delete(key) {
      await unlink(resolve(key)).catch((err) => {
        if (!absent(err)) throw err;
      });
    },
    async *list() {
      // Depth first, one directory's names at a time; a directory that vanished meanwhile is empty.
      const pending: string[] = [''];
      while (pending.length) {
        const prefix = pending.pop()!;
        const entries = await readdir(path.join(base, prefix), { withFileTypes: true }).catch((err) => {
          if (absent(err)) return [];
          throw err;
        });
        for (const entry of entries) {
          const key = prefix ? `${prefix}/${entry.name}` : entry.name;
          if (entry.isDirectory()) pending.push(key);
          else if (entry.isFile() && !PARTIAL.test(entry.name)) {
            const info = await stat(path.join(base, key)).catch((err) => (absent(err) ? null : Promise.reject(err)));
            if (info) yield { key, size: info.size };
          }
        }
      }
    },
  };
}

/** S3 error codes meaning "no such object". */
const notFound = (err: unknown) => ['NoSuchKey', 'NotFound', 'NoSuchObject'].includes((err as { code?: string })?.code ?? '');

/**
 * Part size of multipart uploads: S3's minimum is 5 MiB (except the last part) and an upload has at
 * most 10,000 parts, so objects of up to ~78 GiB; a put holds at most one part in memory.
 */
export const S3_PART_SIZE = 8 * 1024 * 1024;

/**
 * S3 or MinIO storage in `bucket` through the minio client; the bucket is created when missing.
 *
 * A body known in full (Buffer, string) or a stream shorter than one part is sent in one PUT; a
 * longer stream goes up as its own multipart upload, part by part as it is read, completed at the
 * end (only then does the object appear) and aborted on failure. We drive the multipart upload
 * ourselves rather than through `putObject(stream)`, which, for a stream of unknown length, buffers
 * parts of ~550 MiB, first lists the bucket's incomplete uploads (an extra permission,
 * s3:ListBucketMultipartUploads, that S3-compatible servers such as s3rver lack) and resumes another
 * writer's unfinished upload of the same key.
 *
 * @throws Error (from the client) when the endpoint or credentials are unusable.
 */
export async function s3Storage(options: { endpoint: string; accessKey: string; secretKey: string; bucket: string; region: string }): Promise<ObjectStorage> {
  // Loaded only here: the minio client and its dependencies are ~25 MB of RSS that a process on
  // filesystem storage (the default) would carry for nothing (issue 17, the worker's memory).
  const Minio = await import('minio');
  const url = new URL(options.endpoint);
  const useSSL = url.protocol === 'https:';
  const client = new Minio.Client({
    endPoint: url.hostname,
    port: url.port ? Number(url.port) : useSSL ? 443 : 80,
    useSSL,
    accessKey: options.accessKey,
    secretKey: options.secretKey,
    region: options.region,
    pathStyle: true,
  });
  const { bucket } = options;
  if (!(await client.bucketExists(bucket))) {
    // Two processes starting together may both try: the loser's "already yours" is fine.
    await client.makeBucket(bucket, options.region).catch(async (err) => {
      if (!(await client.bucketExists(bucket))) throw err;
    });
  }

  async function putStream(key: string, body: Readable, headers: Record<string, string>): Promise<number> {
    let uploadId: string | undefined;
    const parts: { part: number; etag: string }[] = [];
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let size = 0;
    const sendPart = async () => {
      const payload = Buffer.concat(pending, pendingBytes);
      pending = [];
      pendingBytes = 0;
      uploadId ??= await client.initiateNewMultipartUpload(bucket, key, headers);
      const { etag } = await client.uploadPart({ bucketName: bucket, objectName: key, uploadID: uploadId, partNumber: parts.length + 1, headers: {} }, payload);
      parts.push({ part: parts.length + 1, etag });
    };
    try {
      for await (const chunk of body) {
        const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
        pending.push(buf);
        pendingBytes += buf.length;
        size += buf.length;
        if (pendingBytes >= S3_PART_SIZE) await sendPart();
      }
      if (!uploadId) {
        await client.putObject(bucket, key, Buffer.concat(pending, pendingBytes), pendingBytes, headers);
        return size;
      }
      if (pendingBytes > 0) await sendPart();
      await client.completeMultipartUpload(bucket, key, uploadId, parts);
      return size;
    } catch (err) {
      // Best effort: leftover parts cost storage until a bucket lifecycle rule removes them.
      if (uploadId) await client.abortMultipartUpload(bucket, key, uploadId).catch(() => {});
      throw err;
    }
  }

  const storage: ObjectStorage = {
    location: `s3:${url.origin}/${bucket}`,
    async put(key, body, opts) {
      assertObjectKey(key);
      const headers: Record<string, string> = opts?.contentType ? { 'Content-Type': opts.contentType } : {};
      if (body instanceof Readable) return { key, size: await putStream(key, body, headers) };
      const buf = typeof body === 'string' ? Buffer.from(body) : body;
      await client.putObject(bucket, key, buf, buf.length, headers);
      return { key, size: buf.length };
    },
    async get(key) {
      assertObjectKey(key);
      try {
        return await client.getObject(bucket, key);
      } catch (err) {
        if (notFound(err)) throw new ObjectNotFoundError(`no object ${key}`);
        throw err;
      }
    },
    async *scan(key) {
      // The response stream's own chunks (the client gives no way to read into a buffer of ours).
      yield* (await storage.get(key)) as AsyncIterable<Buffer>;
    },
    async stat(key) {
      assertObjectKey(key);
      try {
        return { key, size: (await client.statObject(bucket, key)).size };
      } catch (err) {
        if (notFound(err)) return null;
        throw err;
      }
    },
    async delete(key) {
      assertObjectKey(key);
      await client.removeObject(bucket, key);
    },
    async *list() {
      // ListObjectsV2, page by page as the stream is read; `prefix` entries are folders, not objects.
      for await (const entry of client.listObjectsV2(bucket, '', true) as AsyncIterable<{ name?: string; size: number }>) {
        if (entry.name) yield { key: entry.name, size: entry.size };
      }
    },
  };
  return storage;
}

/** The storage the configuration selects: S3 when S3_ENDPOINT is set, else `<DATA_DIR>/objects`. */
export async function createStorage(config: Config): Promise<ObjectStorage> {
  if (config.S3_ENDPOINT) {
    return s3Storage({
      endpoint: config.S3_ENDPOINT, accessKey: config.S3_ACCESS_KEY!, secretKey: config.S3_SECRET_KEY!,
      bucket: config.S3_BUCKET, region: config.S3_REGION,
    });
  }
  return filesystemStorage(path.join(config.dataDirPath, 'objects'));
}
