import { describe, expect, it } from 'vitest';
import { goLiveStatus, interactionAllowed, loadNetwork, NetworkConfigError, parseNetwork } from '../../lib/network/config.ts';
import { searchText } from '../../lib/network/search-text.ts';

describe('network configuration', () => {
  it('loads the default network with both domains, compiled schemas and annotations', async () => {
    const network = await loadNetwork('local-discovery');
    expect([...network.domains.keys()]).toEqual(['seeker', 'provider']);
    const provider = network.domains.get('provider')!;
    expect(provider.itemType).toBe('facility');
    expect(provider.fields.find((f) => f.name === 'external_id')?.externalId).toBe(true);
    expect(provider.fields.find((f) => f.name === 'category')?.enum).toEqual(['Education', 'Medical', 'Transport/Admin', 'Agro']);
    expect(provider.fields.find((f) => f.name === 'phone')).toMatchObject({ identity: 'phone', private: true, required: false });
    expect(provider.validate({ name: 'PHC Owk', category: 'Medical', district: 'Kurnool', state: 'Andhra Pradesh' })).toBe(true);
    expect(provider.validate({ name: 'PHC Owk', category: 'Clinic', district: 'Kurnool', state: 'Andhra Pradesh' })).toBe(false);
    expect(network.csvArrayDelimiter).toBe('|');
  });

  it('applies go-live rules and the interaction matrix', async () => {
    const network = await loadNetwork('local-discovery');
    const provider = network.domains.get('provider')!;
    expect(goLiveStatus(provider, { name: 'PHC', category: 'Medical', latitude: 15.2, longitude: 78.1 })).toBe('live');
    expect(goLiveStatus(provider, { name: 'PHC', category: 'Medical' })).toBe('draft');
    const seeker = { network: 'local-discovery', domain: 'seeker' };
    const prov = { network: 'local-discovery', domain: 'provider' };
    expect(interactionAllowed(network, seeker, prov)).toBe(true);
    expect(interactionAllowed(network, seeker, seeker)).toBe(false);
    expect(interactionAllowed(network, prov, seeker, 'apply')).toBe(false);
  });

  it('builds the searchable text from the vectorize fields as label: value lines', async () => {
    const network = await loadNetwork('local-discovery');
    const text = searchText(network.domains.get('provider')!, {
      name: 'veternary hospital', category: 'Medical', services: ['vaccination', 'surgery'], latitude: 15.25, district: 'Kurnool',
    });
    expect(text).toBe('Name: veternary hospital\nCategory: Medical\nServices offered: vaccination, surgery\nDistrict: Kurnool');
  });

  it('rejects a missing or inconsistent network with a message saying where', async () => {
    await expect(loadNetwork('no-such-network')).rejects.toThrow(/NETWORK=no-such-network: no file/);
    const base = JSON.parse(JSON.stringify(await import('../../fixtures/networks/local-discovery.json', { with: { type: 'json' } }).then((m) => m.default)));
    base.domains.provider.go_live_required = ['nope'];
    expect(() => parseNetwork(base)).toThrow(NetworkConfigError);
    expect(() => parseNetwork(base)).toThrow(/domains.provider.go_live_required: unknown field "nope"/);
    base.domains.provider.go_live_required = [];
    base.domains.provider.schema.properties.name.type = 'strnig';
    expect(() => parseNetwork(base)).toThrow(/domains.provider.schema/);
    expect(() => parseNetwork({ ...base, csv_array_delimiter: '' })).toThrow(/csv_array_delimiter/);
  });
});
