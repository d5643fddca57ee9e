import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, serviceUrls } from '../../lib/platform/config.ts';

describe('configuration', () => {
  it('applies the documented defaults to an empty environment', () => {
    const config = loadConfig({}, '/srv/ldp');
    expect(config).toMatchObject({
      SIGNALS_PORT: 3001, AGGREGATOR_PORT: 3002, SEARCH_PORT: 3003, HOST: '127.0.0.1', NETWORK: 'local-discovery',
      BULK_UPLOAD_MAX_BYTES: 200_000_000, WORKER_CONCURRENCY: 2, dataDirPath: path.resolve('/srv/ldp/.data'),
    });
    expect(config.DATABASE_URL).toBeUndefined();
    expect(serviceUrls(config)).toEqual({ signals: 'http://127.0.0.1:3001', search: 'http://127.0.0.1:3003', aggregator: 'http://127.0.0.1:3002' });
  });

  it('parses sizes and numbers from strings, and treats empty strings as unset', () => {
    const config = loadConfig({ BULK_UPLOAD_MAX_BYTES: '10MiB', HTTP_BODY_LIMIT: '2mb', SEARCH_PORT: '4000', DATABASE_URL: '', MATCH_SCORE_BANDS: '80,60,40' });
    expect(config.BULK_UPLOAD_MAX_BYTES).toBe(10 * 1024 * 1024);
    expect(config.HTTP_BODY_LIMIT).toBe(2_000_000);
    expect(config.MATCH_SCORE_BANDS).toEqual({ strong: 80, good: 60, fair: 40 });
    expect(config.SEARCH_PORT).toBe(4000);
    expect(config.DATABASE_URL).toBeUndefined();
  });

  it.each([
    ['SIGNALS_PORT', 'abc'],
    ['SIGNALS_PORT', '70000'],
    ['DATABASE_URL', 'mysql://localhost/x'],
    ['LOG_LEVEL', 'loud'],
    ['BULK_UPLOAD_MAX_BYTES', 'lots'],
    ['PII_KEY', Buffer.alloc(16).toString('base64')],
    ['NETWORK', '../etc'],
    ['SMTP_URL', 'http://mail'],
    ['MATCH_SCORE_BANDS', '50,60,70'],
    ['EMBEDDING_PROVIDER', 'openai'],
  ])('rejects %s=%s with an error naming the variable', (name, value) => {
    let error: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems.map((p) => p.variable)).toContain(name);
    expect((error as ConfigError).message).toContain(`${name}:`);
  });

  const problems = (env: Record<string, string>) => {
    try {
      loadConfig(env);
      return [];
    } catch (err) {
      return (err as ConfigError).problems.map((p) => p.variable).sort();
    }
  };

  it('reports every bad variable at once', () => {
    expect(problems({ SIGNALS_PORT: 'x', SEARCH_PORT: 'y' })).toEqual(['SEARCH_PORT', 'SIGNALS_PORT']);
  });

  it('names the missing partner of variables that must come together', () => {
    expect(problems({ S3_ENDPOINT: 'http://minio:9000', OIDC_ISSUER: 'https://id.example' })).toEqual(['OIDC_JWKS_URL', 'S3_ACCESS_KEY']);
  });
});
