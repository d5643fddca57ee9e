/**
 * `ldp openapi --service NAME`: prints the service's OpenAPI 3.1 document (the one it serves at
 * `GET /openapi.json`) without a running instance or a database: it is built from the route docs
 * and the network configuration (NETWORK) alone.
 */
import { buildOpenApiDocument } from '../../api/http/openapi.ts';
import { SERVICES, serviceRouteDocs } from '../../api/server.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { loadNetwork } from '../../lib/network/config.ts';
import { CliError, cliConfig } from '../command-context.ts';

/**
 * Writes the document of `opts.service` as JSON to stdout (indented with `--pretty`).
 * @throws CliError for an unknown service or network.
 */
export async function openapi(opts: { service: string; pretty?: boolean }): Promise<void> {
  if (!SERVICES.includes(opts.service as ServiceName)) throw new CliError(`--service must be one of ${SERVICES.join(', ')}, not ${opts.service}`);
  const { config } = cliConfig();
  const network = await loadNetwork(config.NETWORK).catch((err: Error) => {
    throw new CliError(`network ${config.NETWORK}: ${err.message}`);
  });
  const service = opts.service as ServiceName;
  const document = buildOpenApiDocument(service, serviceRouteDocs[service](network));
  process.stdout.write(`${JSON.stringify(document, null, opts.pretty ? 2 : undefined)}\n`);
}
