/**
 * The SMS adapter (lib/platform/sms.ts): a real HTTP provider started here that checks the body's
 * signature, its failures, and the `.txt` outbox used when no provider is configured.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSmsSender, smsSignature } from '../../lib/platform/sms.ts';
import { loadConfig } from '../../lib/platform/config.ts';
import { tempDir } from '../helpers/platform.ts';

const SECRET = 'a-long-enough-shared-secret';
let server: Server;
let url: string;
const received: { body: string; signature: string | undefined }[] = [];
let answer = 202;

const read = (req: IncomingMessage) => new Promise<string>((resolve) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => resolve(body));
});

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const body = await read(req);
    received.push({ body, signature: req.headers['x-ldp-signature'] as string | undefined });
    res.statusCode = req.headers['x-ldp-signature'] === `sha256=${smsSignature(SECRET, body)}` ? answer : 401;
    res.end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sms`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('SMS sender', () => {
  it('POSTs a signed JSON body to the provider', async () => {
    const sms = createSmsSender({ SMS_PROVIDER_URL: url, SMS_PROVIDER_SECRET: SECRET, dataDirPath: '/nonexistent' });
    const sent = await sms.send({ to: '+919812345678', text: 'Your code is 123456' });
    expect(sent.via).toBe('http');
    const last = received.at(-1)!;
    expect(JSON.parse(last.body)).toEqual({ to: '+919812345678', text: 'Your code is 123456', message_id: sent.messageId });
    expect(last.signature).toBe(`sha256=${smsSignature(SECRET, last.body)}`);
  });

  it('fails when the provider refuses (wrong secret, or an error status), so the task is retried', async () => {
    const wrong = createSmsSender({ SMS_PROVIDER_URL: url, SMS_PROVIDER_SECRET: 'another-secret-of-length', dataDirPath: '/nonexistent' });
    await expect(wrong.send({ to: '+919812345678', text: 'x' })).rejects.toThrow(/answered 401/);
    answer = 503;
    const sms = createSmsSender({ SMS_PROVIDER_URL: url, SMS_PROVIDER_SECRET: SECRET, dataDirPath: '/nonexistent' });
    await expect(sms.send({ to: '+919812345678', text: 'x' })).rejects.toThrow(/answered 503/);
    answer = 202;
  });

  it('writes a .txt file into DATA_DIR/outbox/sms when no provider is set', async () => {
    const dir = await tempDir();
    try {
      const sms = createSmsSender({ dataDirPath: dir });
      const sent = await sms.send({ to: '+919812345678', text: 'Hello' });
      const files = await readdir(path.join(dir, 'outbox', 'sms'));
      expect(files).toEqual([path.basename(sent.file!)]);
      expect(await readFile(sent.file!, 'utf8')).toBe(`To: +919812345678\nMessage-Id: ${sent.messageId}\n\nHello\n`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('requires SMS_PROVIDER_SECRET with SMS_PROVIDER_URL', () => {
    expect(() => loadConfig({ SMS_PROVIDER_URL: url })).toThrow(/SMS_PROVIDER_SECRET/);
  });
});
