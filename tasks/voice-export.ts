/**
 * Task `voice-export` {job_id}: writes the CSV of an export-channel job's resolved contacts to
 * object storage (`voice-exports/<org_id>/<job_id>.csv`) for an external dialler — identity fields
 * decrypted only here, every cell protected against formula injection (DESIGN.md "Data rules"),
 * streamed page by page — then records its key on the job, which completes it. Enqueued by the
 * chunk that resolves the job's last pending item. Idempotent: a job with its export recorded is
 * left alone; a retry rewrites the whole object.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { stringify } from 'csv-stringify';
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { protectCell } from '../lib/aggregator/bulk/error-report.ts';
import { recordExport, resolvedContacts } from '../lib/aggregator/voice/dispatch.ts';
import { loadVoiceJob, type ExportPayload } from '../lib/aggregator/voice/jobs.ts';

export const EXPORT_COLUMNS = ['item_id', 'participant_type', 'name', 'phone', 'email'] as const;
const PAGE = 5000;

/** Object key of the export CSV of job `jobId` of organisation `orgId`. */
export function exportObjectKey(orgId: string, jobId: string): string {
  return `voice-exports/${orgId}/${jobId}.csv`;
}

/** The `voice-export` task (see the module comment). */
export function voiceExport(ctx: PlatformContext): Task {
  return async (payload) => {
    const { job_id: jobId } = payload as ExportPayload;
    const job = await loadVoiceJob(ctx.pool, jobId);
    if (!job || job.channel !== 'export' || job.export_object_key) return;
    const key = exportObjectKey(job.org_id, jobId);
    const dec = (v: string | null) => (v === null ? '' : ctx.pii.decrypt(v));
    let rows = 0;
    async function* records() {
      yield [...EXPORT_COLUMNS];
      for (let first = 0; first < job!.total; first += PAGE) {
        for (const r of await resolvedContacts(ctx.pool, jobId, first, first + PAGE - 1)) {
          rows++;
          yield [r.item_id, r.domain, dec(r.name_encrypted), dec(r.phone_encrypted), dec(r.email_encrypted)].map(protectCell);
        }
      }
    }
    const csv = stringify({ record_delimiter: 'windows', bom: true });
    pipeline(Readable.from(records()), csv).catch(() => {});
    await ctx.storage.put(key, csv, { contentType: 'text/csv; charset=utf-8' });
    await recordExport(ctx.pool, jobId, key, rows);
  };
}
