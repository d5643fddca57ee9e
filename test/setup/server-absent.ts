/**
 * The `pgvector-server` test project when this machine has no PostgreSQL server with pgvector
 * (vitest.config.ts): its tests are skipped, and this says why.
 */
import { it } from 'vitest';
import { serverPath } from './server-path.ts';

const server = serverPath();
it.skip(`search, migrations and bulk upload on PostgreSQL with pgvector (skipped: ${'absent' in server ? server.absent : 'server present'})`, () => {});
