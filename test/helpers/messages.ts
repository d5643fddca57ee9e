/**
 * Messages the platform sent, as a person would receive them: e-mails in a real SMTP server
 * (smtp-server, parsed with mailparser) or in the `.eml` outbox, SMS in the `.txt` outbox.
 */
import { readdir, readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { simpleParser, type AddressObject } from 'mailparser';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMessage {
  to: string;
  subject: string;
  text: string;
}

/** An SMTP server on a free port keeping every message it accepts. */
export async function startSmtpSink(): Promise<{ url: string; messages: ReceivedMessage[]; close(): Promise<void> }> {
  const messages: ReceivedMessage[] = [];
  const server = new SMTPServer({
    logger: false, disabledCommands: ['STARTTLS'], authOptional: true,
    onData(stream, _session, callback) {
      simpleParser(stream).then((mail) => {
        const to = (mail.to as AddressObject | undefined)?.value.map((a) => a.address).join(',') ?? '';
        messages.push({ to, subject: mail.subject ?? '', text: mail.text ?? '' });
        callback();
      }, callback);
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.server.address() as AddressInfo;
  return { url: `smtp://127.0.0.1:${port}`, messages, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** E-mails in `<dataDir>/outbox` and SMS in `<dataDir>/outbox/sms`. */
export async function readOutbox(dataDir: string): Promise<ReceivedMessage[]> {
  const out: ReceivedMessage[] = [];
  const mailDir = path.join(dataDir, 'outbox');
  for (const f of (await readdir(mailDir).catch(() => [])).filter((f) => f.endsWith('.eml')).sort()) {
    const mail = await simpleParser(await readFile(path.join(mailDir, f)));
    out.push({ to: (mail.to as AddressObject).value.map((a) => a.address).join(','), subject: mail.subject ?? '', text: mail.text ?? '' });
  }
  const smsDir = path.join(mailDir, 'sms');
  for (const f of (await readdir(smsDir).catch(() => [])).filter((f) => f.endsWith('.txt')).sort()) {
    const text = await readFile(path.join(smsDir, f), 'utf8');
    out.push({ to: /^To: (.*)$/m.exec(text)![1], subject: '', text: text.split('\n\n').slice(1).join('\n\n') });
  }
  return out;
}

/**
 * Waits until `list()` holds a message to `to` beyond the first `skip` ones to that address, and
 * returns it (the worker sends asynchronously). @throws after `timeoutMs`.
 */
export async function waitForMessage(list: () => Promise<ReceivedMessage[]> | ReceivedMessage[], to: string, skip = 0, timeoutMs = 20_000): Promise<ReceivedMessage> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = (await list()).filter((m) => m.to === to);
    if (found.length > skip) return found[skip];
    if (Date.now() > deadline) throw new Error(`no message to ${to} within ${timeoutMs} ms (have ${found.length})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The 6-digit code of a message. */
export const codeOf = (m: ReceivedMessage) => /\b(\d{6})\b/.exec(m.text)![1];
