/**
 * Outgoing e-mail (lib/mail.ts) against a real SMTP server started here (smtp-server), messages
 * parsed with mailparser; and the outbox mode that writes `.eml` files into `<DATA_DIR>/outbox`.
 */
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { simpleParser, type AddressObject, type ParsedMail } from 'mailparser';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMailer, type MailMessage } from '../../lib/platform/mail.ts';
import { tempDir } from '../helpers/platform.ts';

const FROM = 'Local Discovery Platform <no-reply@ldp.test>';

interface Received {
  mailFrom: string;
  rcptTo: string[];
  user?: string;
  raw: Buffer;
}

/** An SMTP server on a free port that keeps what it accepts, and refuses on cue. */
async function startSmtpServer(options: Partial<SMTPServerOptions> = {}) {
  const received: Received[] = [];
  const server = new SMTPServer({
    logger: false,
    disabledCommands: ['STARTTLS'],
    authOptional: true,
    allowInsecureAuth: true,
    onAuth(auth, _session, callback) {
      if (auth.username === 'ldp@mailer' && auth.password === 'p@ss:word/1') return callback(null, { user: auth.username });
      return callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
    },
    onRcptTo(address, _session, callback) {
      if (address.address.endsWith('@refused.test')) return callback(Object.assign(new Error('No such mailbox'), { responseCode: 550 }));
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks);
        if (raw.includes('REFUSE-THIS-MESSAGE')) {
          return callback(Object.assign(new Error('Message refused by policy'), { responseCode: 554 }));
        }
        received.push({
          mailFrom: (session.envelope.mailFrom as { address: string }).address,
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          user: session.user as string | undefined,
          raw,
        });
        callback();
      });
    },
    ...options,
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.server.address() as AddressInfo;
  return { received, port, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

const addressList = (a: AddressObject | AddressObject[] | undefined) =>
  (Array.isArray(a) ? a : a ? [a] : []).flatMap((o) => o.value.map((v) => v.address));

const message = (over: Partial<MailMessage> = {}): MailMessage => ({
  to: ['support@ldp.test', 'ops@ldp.test'],
  cc: 'asha@partner.test',
  replyTo: 'Asha Devi <asha@partner.test>',
  subject: 'Support request: bulk upload 42 — नमस्ते',
  text: 'Rows 3 and 7 failed.\nZoë asks for help.',
  html: '<p>Rows 3 and 7 failed.</p>',
  attachments: [{ filename: 'errors.csv', contentType: 'text/csv', content: Buffer.from('row,error\n3,phone: not E.164\n') }],
  ...over,
});

/** What every rendered message must say, whatever carried it. */
function expectRendered(parsed: ParsedMail) {
  expect(parsed.from?.value).toEqual([{ name: 'Local Discovery Platform', address: 'no-reply@ldp.test' }]);
  expect(addressList(parsed.to)).toEqual(['support@ldp.test', 'ops@ldp.test']);
  expect(addressList(parsed.cc)).toEqual(['asha@partner.test']);
  expect(parsed.replyTo?.value).toEqual([{ name: 'Asha Devi', address: 'asha@partner.test' }]);
  expect(parsed.subject).toBe('Support request: bulk upload 42 — नमस्ते');
  expect(parsed.text?.trim()).toBe('Rows 3 and 7 failed.\nZoë asks for help.');
  expect(parsed.html).toContain('<p>Rows 3 and 7 failed.</p>');
  expect(parsed.attachments).toHaveLength(1);
  expect(parsed.attachments[0]).toMatchObject({ filename: 'errors.csv', contentType: 'text/csv' });
  expect(parsed.attachments[0].content.toString()).toBe('row,error\n3,phone: not E.164\n');
  expect(parsed.messageId).toMatch(/^<.+@.+>$/);
}

describe('mail over SMTP (real smtp-server)', () => {
  let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
  let dataDir: string;
  const mailer = (url = `smtp://127.0.0.1:${smtp.port}`) => createMailer({ SMTP_URL: url, MAIL_FROM: FROM, dataDirPath: dataDir });

  beforeAll(async () => {
    smtp = await startSmtpServer();
    dataDir = await tempDir('ldp-mail-');
  });
  afterAll(async () => {
    await smtp?.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  beforeEach(() => {
    smtp.received.length = 0;
  });

  it('delivers from, to, cc, reply-to, subject, text, html and attachments', async () => {
    const m = mailer();
    expect(m.location).toBe(`smtp:127.0.0.1:${smtp.port}`);
    const sent = await m.send(message());
    expect(sent).toMatchObject({ via: 'smtp', accepted: ['support@ldp.test', 'ops@ldp.test', 'asha@partner.test'], rejected: [] });
    expect(smtp.received).toHaveLength(1);
    const [got] = smtp.received;
    expect(got.mailFrom).toBe('no-reply@ldp.test');
    expect(got.rcptTo).toEqual(['support@ldp.test', 'ops@ldp.test', 'asha@partner.test']);
    const parsed = await simpleParser(got.raw);
    expectRendered(parsed);
    expect(parsed.messageId).toBe(sent.messageId);
    // Nothing was written to the outbox.
    await expect(readdir(path.join(dataDir, 'outbox'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('logs in with the credentials of SMTP_URL, percent-decoded', async () => {
    const sent = await mailer(`smtp://ldp%40mailer:p%40ss%3Aword%2F1@127.0.0.1:${smtp.port}`).send(message({ cc: undefined, attachments: undefined }));
    expect(sent.via).toBe('smtp');
    expect(smtp.received.map((r) => r.user)).toEqual(['ldp@mailer']);
  });

  it('throws when the login is refused', async () => {
    await expect(mailer(`smtp://ldp%40mailer:wrong@127.0.0.1:${smtp.port}`).send(message())).rejects.toMatchObject({ code: 'EAUTH', responseCode: 535 });
    expect(smtp.received).toHaveLength(0);
  });

  it('throws when the server refuses the message, and nothing is kept', async () => {
    await expect(mailer().send(message({ text: 'REFUSE-THIS-MESSAGE' }))).rejects.toMatchObject({ responseCode: 554 });
    expect(smtp.received).toHaveLength(0);
  });

  it('throws when every recipient is refused', async () => {
    await expect(mailer().send(message({ to: 'nobody@refused.test', cc: 'none@refused.test' }))).rejects.toMatchObject({ code: 'EENVELOPE' });
    expect(smtp.received).toHaveLength(0);
  });

  it('reports recipients refused while the others got the message', async () => {
    const sent = await mailer().send(message({ to: 'support@ldp.test', cc: 'typo@refused.test' }));
    expect(sent.accepted).toEqual(['support@ldp.test']);
    expect(sent.rejected).toEqual(['typo@refused.test']);
    expect(smtp.received.map((r) => r.rcptTo)).toEqual([['support@ldp.test']]);
  });

  it('throws when no server listens', async () => {
    const gone = await startSmtpServer();
    await gone.close();
    await expect(mailer(`smtp://127.0.0.1:${gone.port}`).send(message())).rejects.toThrow('ECONNREFUSED');
  });
});

describe('mail into the outbox (no SMTP_URL)', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = await tempDir('ldp-outbox-');
  });
  afterAll(() => rm(dataDir, { recursive: true, force: true }));

  it('writes each message as a parseable .eml file into <DATA_DIR>/outbox', async () => {
    const mailer = createMailer({ MAIL_FROM: FROM, dataDirPath: dataDir });
    const outbox = path.join(dataDir, 'outbox');
    expect(mailer.location).toBe(`outbox:${outbox}`);
    const first = await mailer.send(message());
    const second = await mailer.send(message({ subject: 'Second', attachments: undefined }));
    expect(first).toMatchObject({ via: 'outbox', accepted: ['support@ldp.test', 'ops@ldp.test', 'asha@partner.test'], rejected: [] });
    expect(path.dirname(first.file!)).toBe(outbox);
    expect(first.file).toMatch(/\.eml$/);

    const files = (await readdir(outbox)).sort();
    expect(files).toEqual([path.basename(first.file!), path.basename(second.file!)].sort()); // no temporary files left
    const parsed = await simpleParser(await readFile(first.file!));
    expectRendered(parsed);
    expect(parsed.messageId).toBe(first.messageId);
    expect((await simpleParser(await readFile(second.file!))).subject).toBe('Second');
  });

  it('throws when the outbox cannot be written', async () => {
    const blocked = path.join(dataDir, 'not-a-dir');
    await writeFile(blocked, 'a file where DATA_DIR should be');
    await expect(createMailer({ MAIL_FROM: FROM, dataDirPath: blocked }).send(message())).rejects.toMatchObject({ code: 'ENOTDIR' });
  });
});
