/**
 * Object storage for uploads and reports: the filesystem under `<DATA_DIR>/objects` by default,
 * S3/MinIO through the `minio` client when S3_ENDPOINT is set. Both stream in and out, so no
 * object is ever held whole in memory.
 *
 * Object keys are `/`-separated segments of `[A-Za-z0-9._-]`; `.`/`..` segments, empty segments,
 * absolute keys and anything else that could escape the root are rejected (StorageKeyError).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import * as Minio from 'minio';
import type { Config } from './config.ts';

export interface ObjectInfo {
  key: string;
  /** Size in bytes. */
  size: number;
}

export interface ObjectStorage {
  /** Human-readable location, e.g. `filesystem:/srv/ldp/objects` or `s3:http://minio:9000/ldp`. */
  readonly location: string;
  /** Stores `body` under `key`, replacing any object there; the object appears only once complete. */
  put(key: string, body: Readable | Buffer | string, options?: { contentType?: string }): Promise<ObjectInfo>;
  /** Streams the object. @throws ObjectNotFoundError */
  get(key: string): Promise<Readable>;
  /** Size of the object, or null when there is none. */
  stat(key: string): Promise<ObjectInfo | null>;
  /** Deletes the object; deleting a missing object is not an error. */
  delete(key: string): Promise<void>;
}

/** A key that is malformed or would escape the storage root. */
export class StorageKeyError extends Error {
  name = 'StorageKeyError';
}

export class ObjectNotFoundError extends Error {
  name = 'ObjectNotFoundError';
}

const SEGMENT = /^[A-Za-z0-9._-]+$/;

/** Returns `key` when it is a safe object key. @throws StorageKeyError */
export function assertObjectKey(key: string): string {
  const segments = key.split('/');
  const bad = key.length === 0 || key.length > 1024
    || segments.some((s) => s === '' || s === '.' || s === '..' || !SEGMENT.test(s));
  if (bad) throw new StorageKeyError(`invalid object key: ${JSON.stringify(key.slice(0, 100))}`);
  return key;
}

function toStream(body: Readable | Buffer | string): Readable {
  return body instanceof Readable ? body : Readable.from([typeof body === 'string' ? Buffer.from(body) : body]);
}

/** Filesystem storage rooted at `root`; writes go to a temporary file renamed into place. */
export function filesystemStorage(root: string): ObjectStorage {
  const base = path.resolve(root);
  const resolve = (key: string) => {
    const file = path.resolve(base, assertObjectKey(key));
    if (!file.startsWith(base + path.sep)) throw new StorageKeyError(`object key escapes the storage root: ${key}`);
    return file;
  };
  return {
    location: `filesystem:${base}`,
    async put(key, body) {
      const file = resolve(key);
      await mkdir(path.dirname(file), { recursive: true });
      const tmp = `${file}.${randomUUID()}.partial`;
      let size = 0;
      const count = new Transform({ transform(chunk, _enc, done) { size += chunk.length; done(null, chunk); } });
      try {
        await pipeline(toStream(body), count, createWriteStream(tmp));
        await rename(tmp, file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
      return { key, size };
    },
    async get(key) {
      const file = resolve(key);
      const info = await stat(file).catch(() => null);
      if (!info?.isFile()) throw new ObjectNotFoundError(`no object ${key}`);
      return createReadStream(file);
    },
    async stat(key) {
      const info = await stat(resolve(key)).catch(() => null);
      return info?.isFile() ? { key, size: info.size } : null;
    },
    async delete(key) {
      await rm(resolve(key), { force: true });
    },
  };
}

/** S3 or MinIO storage in `bucket` through the minio client; the bucket is created when missing. */
export async function s3Storage(options: { endpoint: string; accessKey: string; secretKey: string; bucket: string; region: string }): Promise<ObjectStorage> {
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
  if (!(await client.bucketExists(bucket))) await client.makeBucket(bucket, options.region);
  const notFound = (err: any) => ['NoSuchKey', 'NotFound', 'NoSuchObject'].includes(err?.code);
  return {
    location: `s3:${url.origin}/${bucket}`,
    async put(key, body, opts) {
      assertObjectKey(key);
      const meta = opts?.contentType ? { 'Content-Type': opts.contentType } : undefined;
      await client.putObject(bucket, key, toStream(body), undefined, meta);
      const info = await client.statObject(bucket, key);
      return { key, size: info.size };
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
  };
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
