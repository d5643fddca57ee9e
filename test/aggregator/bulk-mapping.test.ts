/**
 * The richer bulk-upload mapping (issue 17): field specs (column, columns + join, value, map +
 * default, split) applied by the row coercion, and their checks against the participant schema.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { matchHeaders } from '../../lib/aggregator/bulk/header-match.ts';
import { MappingError, type Mapping } from '../../lib/aggregator/bulk/mapping.ts';
import { parseMapping } from '../../lib/aggregator/bulk/parse-mapping.ts';
import { createRowCoercer, type RowOutcome } from '../../lib/aggregator/bulk/row-coercion.ts';
import { TableFormatError } from '../../lib/aggregator/bulk/table.ts';
import { loadNetwork, type Domain, type Network } from '../../lib/network/config.ts';

let network: Network;
let provider: Domain;

beforeAll(async () => {
  network = await loadNetwork('local-discovery');
  provider = network.domains.get('provider')!;
});

function coerce(row: Record<string, string>, mapping: Mapping): RowOutcome {
  const checked = parseMapping(network, provider, mapping);
  return createRowCoercer(network, provider, matchHeaders(provider, Object.keys(row), checked))(Object.values(row));
}

function mappingError(json: unknown): MappingError {
  try {
    parseMapping(network, provider, json);
  } catch (err) {
    expect(err).toBeInstanceOf(MappingError);
    return err as MappingError;
  }
  throw new Error('expected a MappingError');
}

const MAPPING: Mapping = {
  INSTNM: 'name',
  category: { column: 'SECTOR', map: { 1: 'Education', 2: ' medical ', 99: null } },
  services: { column: 'PROGRAMS', split: ';' },
  locality: { columns: ['ADDR', 'CITY'], join: ', ' },
  state: { value: 'Kerala' },
  district: { column: 'CNTY' },
};
const ROW = { INSTNM: 'Govt School', SECTOR: ' 1 ', PROGRAMS: 'reading; maths;;art', ADDR: 'Main Rd', CITY: 'Kochi', CNTY: 'Ernakulam', UNUSED: 'x' };

describe('field specs in the row coercion', () => {
  it('maps codes, splits lists, joins columns and adds constants', () => {
    const outcome = coerce(ROW, MAPPING);
    expect(outcome).toEqual({ ok: true, participant: expect.objectContaining({
      profile: { name: 'Govt School', category: 'Education', services: ['reading', 'maths', 'art'], locality: 'Main Rd, Kochi', state: 'Kerala', district: 'Ernakulam' },
    }) });
  });

  it('compares map keys trimmed and without case, canonicalises mapped values, skips blanks when joining', () => {
    const outcome = coerce({ ...ROW, SECTOR: '2', CITY: '' }, MAPPING);
    expect(outcome.ok && outcome.participant.profile).toMatchObject({ category: 'Medical', locality: 'Main Rd' });
  });

  it('fails a row whose value is not in the map, naming the value and the mapped ones; null empties the field', () => {
    const unmapped = coerce({ ...ROW, SECTOR: '7' }, MAPPING);
    expect(unmapped).toEqual({ ok: false, errors: [{ field: 'category', message: 'category has no mapping for the value "7" of column SECTOR; mapped values are "1", "2", "99"' }] });
    const empty = coerce({ ...ROW, SECTOR: '99' }, MAPPING);
    expect(empty).toEqual({ ok: false, errors: [{ field: 'category', message: 'category is required' }] });
  });

  it('uses the default for values the map does not list', () => {
    const mapping = { ...MAPPING, category: { column: 'SECTOR', map: { 1: 'Education' }, default: 'Agro' } };
    const outcome = coerce({ ...ROW, SECTOR: '5' }, mapping);
    expect(outcome.ok && outcome.participant.profile.category).toBe('Agro');
  });

  it('takes list constants as JSON arrays or delimited text', () => {
    const array = coerce(ROW, { ...MAPPING, languages: { value: ['Malayalam', 'english'] } });
    expect(array.ok && array.participant.profile.languages).toEqual(['Malayalam', 'English']);
    const text = coerce(ROW, { ...MAPPING, languages: { value: `Malayalam${network.csvArrayDelimiter}Hindi` } });
    expect(text.ok && text.participant.profile.languages).toEqual(['Malayalam', 'Hindi']);
    expect(mappingError({ languages: { value: ['Klingon'] } }).message).toMatch(/languages: value "Klingon" is not a valid value/);
  });

  it('maps the items of a split list', () => {
    const mapping = { ...MAPPING, languages: { column: 'LANG', split: '/', map: { hi: 'Hindi', ml: 'Malayalam' } } };
    const outcome = coerce({ ...ROW, LANG: 'HI / ml' }, mapping);
    expect(outcome.ok && outcome.participant.profile.languages).toEqual(['Hindi', 'Malayalam']);
  });

  it('counts a spec as the column of a required field, and refuses a spec naming a column the file lacks', () => {
    const { INSTNM: _n, ...rest } = ROW;
    expect(() => matchHeaders(provider, Object.keys(rest), parseMapping(network, provider, MAPPING)))
      .toThrow(TableFormatError);
    expect(() => matchHeaders(provider, Object.keys(ROW), parseMapping(network, provider, { ...MAPPING, district: { column: 'COUNTY' } })))
      .toThrow(/the mapping of district names the column "COUNTY", which is not in the file's header row/);
  });
});

describe('checks against the participant schema', () => {
  it.each([
    [{ category: { value: 'Schools' } }, 'category', /category: value "Schools" is not a valid value: category must be one of Education, Medical/],
    [{ category: { column: 'S', map: { 1: 'Edu' } } }, 'category', /map value for "1": "Edu" is not a valid value/],
    [{ category: { column: 'S', map: { 1: 'Education' }, default: 'Other' } }, 'category', /default "Other" is not a valid value/],
    [{ name: { column: 'N', split: ';' } }, 'name', /split is for list fields; name holds a single string/],
    [{ name: { column: 'N', value: 'x' } }, 'name', /give exactly one of column, columns or value \(got column and value\)/],
    [{ name: {} }, 'name', /give exactly one of column, columns or value/],
    [{ name: { column: 'N', join: ' ' } }, 'name', /join goes with columns/],
    [{ name: { column: 'N', default: 'x' } }, 'name', /default goes with map/],
    [{ name: { column: 'N', mapping: {} } }, 'name', /unknown option "mapping"/],
    [{ capacity: { value: 'many' } }, 'capacity', /capacity must be a whole number/],
    [{ category: { column: 'S', map: { a: 'Education', A: 'Medical' } } }, 'category', /map has "A" twice/],
  ])('refuses %j naming %s', (json, field, message) => {
    const err = mappingError(json);
    expect(err.field).toBe(field);
    expect(err.message).toMatch(message);
  });

  it('refuses specs keyed by something that is not a field, and header entries naming an unknown field', () => {
    expect(mappingError({ sector: { value: 'x' } })).toMatchObject({ field: null, message: expect.stringMatching(/"sector" is not a provider field/) });
    expect(mappingError({ SECTOR: 'sector' })).toMatchObject({ field: null, message: expect.stringMatching(/unknown provider fields "sector" \(for "SECTOR"\)/) });
    expect(mappingError([])).toMatchObject({ field: null });
    expect(mappingError({ NAME: 'name', name: { value: 'x' } })).toMatchObject({ field: 'name' });
  });

  it('keeps the original header → field maps as they were', () => {
    expect(parseMapping(network, provider, { facility_id: 'external_id', block_id: null })).toEqual({ facility_id: 'external_id', block_id: null });
  });
});
