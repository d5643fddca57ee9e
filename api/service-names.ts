/**
 * The names of the platform's HTTP services, apart from their apps (api/server.ts): the command
 * line and a process that runs no service (`ldp worker`) name them without loading Express and
 * every route (~20 MB of the worker's RSS, issue 17).
 */
export type ServiceName = 'signals' | 'search' | 'aggregator';

/** Every service, in start order. */
export const SERVICES: ServiceName[] = ['signals', 'aggregator', 'search'];
