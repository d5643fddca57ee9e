/**
 * The people and action parts of the network configuration (issue 7): action statuses, the
 * PII-reveal status, requirement schemas compiled by Ajv, guardian consent age and consent version,
 * all checked at start.
 */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { loadNetwork, NETWORKS_DIR, parseNetwork } from '../../lib/network/config.ts';

const fixture = async () => JSON.parse(await readFile(`${NETWORKS_DIR}/local-discovery.json`, 'utf8'));

describe('network configuration: people and actions', () => {
  it('loads the statuses, reveal status, requirement validators, consent age and version', async () => {
    const network = await loadNetwork('local-discovery');
    expect(network.people).toEqual({ guardian_consent_age: 18, consent_version: 1 });
    expect(Object.keys(network.actions.apply.statuses!)).toEqual(['created', 'accepted', 'rejected', 'completed', 'cancelled']);
    expect(network.actions.apply.reveals_pii_on_status).toBe('accepted');
    const validate = network.actionRequirements.get('apply')!;
    expect(validate({ message: 'hello', preferred_start_date: '2026-12-01' })).toBe(true);
    expect(validate({ preferred_start_date: 'soon' })).toBe(false);
    expect(network.actionRequirements.has('discover')).toBe(false);
  });

  it('defaults the people block when a network leaves it out', async () => {
    const base = await fixture();
    delete base.people;
    expect(parseNetwork(base).people).toEqual({ guardian_consent_age: 18, consent_version: 1 });
  });

  it.each([
    ['an unknown next status', (b: any) => { b.actions.apply.statuses.created.next.push('teleported'); }, /actions.apply.statuses.created: unknown next status "teleported"/],
    ['a terminal status with moves', (b: any) => { b.actions.apply.statuses.completed.next = ['created']; }, /a terminal status has no next statuses/],
    ['an unknown reveal status', (b: any) => { b.actions.apply.reveals_pii_on_status = 'met'; }, /reveals_pii_on_status: unknown status "met"/],
    ['a broken requirements schema', (b: any) => { b.actions.apply.requirements_schema.properties.message.type = 'text'; }, /actions.apply.requirements_schema/],
    ['a reveal status without statuses', (b: any) => { b.actions.discover.reveals_pii_on_status = 'created'; }, /actions.discover: reveals_pii_on_status and requirements_schema need statuses/],
    ['a consent age of 0', (b: any) => { b.people.guardian_consent_age = 0; }, /people.guardian_consent_age/],
    ['a consent version of 0', (b: any) => { b.people.consent_version = 0; }, /people.consent_version/],
  ])('refuses %s, naming where', async (_what, change, message) => {
    const base = await fixture();
    change(base);
    expect(() => parseNetwork(base)).toThrow(message);
  });
});
