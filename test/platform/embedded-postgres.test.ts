/**
 * The embedded PostgreSQL's settings: the test server is started by `startEmbeddedPostgres`
 * (test/setup/global-setup.ts), as `ldp start` starts it.
 */
import pg from 'pg';
import { inject, describe, expect, it } from 'vitest';
import { sharedBuffersMb } from '../../lib/platform/embedded-postgres.ts';

const GB = 2 ** 30;

describe('embedded PostgreSQL', () => {
  it('sizes shared_buffers at a quarter of the memory, between 128 MB and 1 GB', async () => {
    expect([0.25, 2, 3, 4, 64].map((gb) => sharedBuffersMb(gb * GB))).toEqual([128, 512, 768, 1024, 1024]);
    const client = new pg.Client({ connectionString: `${inject('pgServerUrl')}postgres` });
    await client.connect();
    try {
      const { rows: [row] } = await client.query(`SELECT setting::int * 8 / 1024 AS mb FROM pg_settings WHERE name = 'shared_buffers'`);
      expect(row.mb).toBe(sharedBuffersMb());
    } finally {
      await client.end();
    }
  });
});
