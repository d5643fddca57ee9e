/** `ldp keys create|revoke|list --service signals|search`: API keys of the signals and search services. */
import { createApiKey, KEY_SERVICES, listApiKeys, revokeApiKey, type KeyService } from '../../lib/platform/api-keys.ts';
import { CliError, withPlatformContext } from '../command-context.ts';

function service(name: string): KeyService {
  if (!KEY_SERVICES.includes(name as KeyService)) throw new CliError(`--service must be one of ${KEY_SERVICES.join(', ')}`);
  return name as KeyService;
}

/** Creates a key and prints it alone on stdout (the only time it is shown). */
export async function keysCreate(opts: { service: string; name: string }): Promise<void> {
  const svc = service(opts.service);
  const { key } = await withPlatformContext((ctx) => createApiKey(ctx.pool, svc, opts.name));
  process.stdout.write(`${key}\n`);
}

export async function keysRevoke(keyId: string, opts: { service: string }): Promise<void> {
  const svc = service(opts.service);
  const revoked = await withPlatformContext((ctx) => revokeApiKey(ctx.pool, svc, keyId));
  if (!revoked) throw new CliError(`No active ${svc} key with id ${keyId}`);
  process.stdout.write(`revoked ${keyId}\n`);
}

export async function keysList(opts: { service: string }): Promise<void> {
  const svc = service(opts.service);
  const keys = await withPlatformContext((ctx) => listApiKeys(ctx.pool, svc));
  for (const k of keys) {
    process.stdout.write(`${k.key_id}  ${k.key_prefix}…  ${k.name}  ${k.revoked_at ? 'revoked' : 'active'}\n`);
  }
}
