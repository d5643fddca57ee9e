/**
 * The real PMGSY facility files of ../shared/data, read as provider items for the benchmarks
 * (the same mapping as fixtures/column-maps/pmgsy-facilities.json, without the bulk pipeline).
 */
import { createReadStream } from 'node:fs';
import { parse } from 'csv-parse';
import type { ItemInput } from '../lib/network/items.ts';
import type { Domain, Network } from '../lib/network/config.ts';

const clean = (v: string | undefined) => (v ?? '').replace(/\s+/g, ' ').trim();
/** State names of the source spelt otherwise than in the network's enum. */
const STATE_NAMES: Record<string, string> = { Tamilnadu: 'Tamil Nadu' };

/**
 * Yields the rows of `file` as provider item inputs (id from `idOf(n)`, n counting from 0), one
 * location each. Rows are not validated: callers skip those the schema refuses.
 */
export async function* facilityItems(file: string, network: Network, provider: Domain, idOf: (n: number) => string): AsyncGenerator<ItemInput> {
  let n = 0;
  for await (const r of createReadStream(file).pipe(parse({ columns: true, relax_column_count: true })) as AsyncIterable<Record<string, string>>) {
    const lat = Number(r.latitude);
    const lng = Number(r.longitude);
    const state: Record<string, unknown> = {
      external_id: clean(r.facility_id), name: clean(r.name) || 'Unnamed facility', category: clean(r.category),
      district: clean(r.district_name), state: STATE_NAMES[clean(r.state_name)] ?? clean(r.state_name), latitude: lat, longitude: lng,
    };
    if (clean(r.habitation_name)) state.locality = clean(r.habitation_name);
    if (clean(r.block_name)) state.block = clean(r.block_name);
    yield {
      item_network: network.id, item_domain: provider.name, item_type: provider.itemType, item_id: idOf(n++),
      item_state: state, item_locations: [{ lat, lng }],
    };
  }
}
