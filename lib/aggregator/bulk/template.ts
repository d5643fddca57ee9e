/**
 * Bulk-upload templates of a participant domain (spec "GET /v1/bulk-uploads/template" rules 1–5),
 * generated from the domain's participant schema:
 * - CSV: UTF-8 with a byte-order mark (so Excel opens it as UTF-8), CRLF, a header row of field
 *   names plus one example row from the schema's `examples`; cells protected against formula
 *   injection like the error reports (lib/bulk/error-report.ts `protectCell`: a leading `'`, which
 *   lib/bulk/csv-table.ts removes again when the file comes back).
 * - XLSX: four tabs — Instructions, Allowed values (one column per closed-set field), Sample rows
 *   (the example row plus realistic rows from fixtures/template-samples/<network>.json) and the
 *   empty grid `Participants`, whose header row is the field names (required ones bold on yellow,
 *   with a note), with dropdowns fed from the Allowed values tab on every closed-set column and
 *   number checks on bounded numbers, over the first TEMPLATE_GRID_ROWS rows.
 * Array fields are written joined with the network's `csv_array_delimiter`, booleans as yes/no.
 */
import { readFile } from 'node:fs/promises';
import { stringify } from 'csv-stringify/sync';
import type ExcelJS from 'exceljs';
import type { Domain, FieldInfo, Network } from '../../network/config.ts';
import { protectCell } from './error-report.ts';
import { columnLetter } from './table.ts';
import { TEMPLATE_GRID_SHEET } from './table.ts';

export type TemplateFormat = 'csv' | 'xlsx';

/** Tab names of the XLSX template, in order. */
export const TEMPLATE_SHEETS = {
  instructions: 'Instructions',
  allowedValues: 'Allowed values',
  samples: 'Sample rows',
  grid: TEMPLATE_GRID_SHEET,
} as const;

/** Rows of the grid tab (below its header) that carry dropdowns and number checks. */
export const TEMPLATE_GRID_ROWS = 10_000;

export const TEMPLATE_CONTENT_TYPES: Record<TemplateFormat, string> = {
  csv: 'text/csv; charset=utf-8',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
};

const SAMPLES_DIR = new URL('../../../fixtures/template-samples/', import.meta.url);
const REQUIRED_FILL: ExcelJS.Fill = { type: 'pattern', pattern: 'solid', fgColor: { argb: 'FFFFF2CC' } };
const HEADER_FILL: ExcelJS.Fill = { type: 'pattern', pattern: 'solid', fgColor: { argb: 'FFD9E1F2' } };

/** `<network>-<domain>-template.<format>`, e.g. `local-discovery-provider-template.xlsx`. */
export function templateFileName(network: Network, domain: Domain, format: TemplateFormat): string {
  return `${network.id}-${domain.name}-template.${format}`;
}

/** A typed profile value as a template cell: arrays joined with the network's delimiter, booleans yes/no. */
export function templateCell(network: Network, value: unknown): string {
  if (value === undefined || value === null) return '';
  if (Array.isArray(value)) return value.map((v) => templateCell(network, v)).join(network.csvArrayDelimiter);
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  return String(value);
}

/** The example profile of a domain: each field's first schema `examples` value. */
export function exampleProfile(domain: Domain): Record<string, unknown> {
  return Object.fromEntries(domain.fields.filter((f) => f.examples.length > 0).map((f) => [f.name, f.examples[0]]));
}

/** The CSV template (see the module comment), as text starting with a byte-order mark. */
export function csvTemplate(network: Network, domain: Domain): string {
  const example = exampleProfile(domain);
  return `\uFEFF${stringify([
    domain.fields.map((f) => f.name),
    domain.fields.map((f) => protectCell(templateCell(network, example[f.name]))),
  ], { record_delimiter: 'windows' })}`;
}

/**
 * The XLSX template (see the module comment).
 * @throws Error when a sample row of fixtures/template-samples does not validate against the schema.
 */
export async function xlsxTemplate(network: Network, domain: Domain): Promise<Buffer> {
  const samples = [exampleProfile(domain), ...await sampleProfiles(network, domain)];
  const closedSets = domain.fields.flatMap((f) => {
    const values = allowedValues(f);
    return values ? [{ field: f, values }] : [];
  });

  // exceljs (with jszip, unzipper, archiver) is loaded by the first XLSX template asked for: every
  // service process imports this module through the aggregator's routes (open-table.ts does the same
  // for workbooks read).
  const { default: excel } = await import('exceljs');
  const workbook = new excel.Workbook();
  workbook.creator = network.name;
  workbook.title = `${domain.label} bulk-upload template`;
  addInstructions(workbook, network, domain, closedSets.map((c) => c.field.name));

  const allowed = workbook.addWorksheet(TEMPLATE_SHEETS.allowedValues);
  const listRanges = new Map<string, string>();
  closedSets.forEach(({ field, values }, i) => {
    const column = allowed.getColumn(i + 1);
    column.values = [field.name, ...values];
    column.width = Math.max(14, field.name.length + 2, ...values.map((v) => v.length + 2));
    const letter = columnLetter(i);
    listRanges.set(field.name, `'${TEMPLATE_SHEETS.allowedValues}'!$${letter}$2:$${letter}$${values.length + 1}`);
  });
  styleHeader(allowed.getRow(1));

  const sampleSheet = workbook.addWorksheet(TEMPLATE_SHEETS.samples);
  sampleSheet.addRow(domain.fields.map((f) => f.name));
  for (const sample of samples) sampleSheet.addRow(domain.fields.map((f) => templateCell(network, sample[f.name])));
  styleGridColumns(sampleSheet, domain);

  const grid = workbook.addWorksheet(TEMPLATE_SHEETS.grid, { views: [{ state: 'frozen', ySplit: 1 }] });
  grid.addRow(domain.fields.map((f) => f.name));
  styleGridColumns(grid, domain);
  domain.fields.forEach((field, i) => {
    const cell = grid.getRow(1).getCell(i + 1);
    cell.note = `${field.label}${field.required ? ' (required)' : ''}${field.description ? `\n${field.description}` : ''}`;
    const letter = columnLetter(i);
    const range = `${letter}2:${letter}${TEMPLATE_GRID_ROWS + 1}`;
    const validation = gridValidation(network, field, listRanges.get(field.name));
    if (validation) (grid as unknown as { dataValidations: { add(range: string, v: ExcelJS.DataValidation): void } }).dataValidations.add(range, validation);
  });
  return Buffer.from(await workbook.xlsx.writeBuffer());
}

/** The closed set of a field as cell texts (enum values, yes/no for booleans), or null. */
function allowedValues(field: FieldInfo): string[] | null {
  if (field.enum) return field.enum.map(String);
  if (field.kind === 'boolean' || field.itemKind === 'boolean') return ['yes', 'no'];
  return null;
}

/** What to write in a column, for the instructions. */
function howToFill(network: Network, field: FieldInfo): string {
  const parts: string[] = [];
  const kind = field.kind === 'array' ? field.itemKind ?? 'string' : field.kind;
  if (field.identity === 'phone') parts.push('Phone number, with the country code (+91…) or without it (the network\'s country is assumed); stored in E.164 form');
  else if (field.identity === 'email') parts.push('E-mail address');
  else if (allowedValues(field)) parts.push(`${field.kind === 'array' ? 'Values' : 'One value'} from the "${TEMPLATE_SHEETS.allowedValues}" tab (the dropdown offers them; case does not matter)`);
  else if (kind === 'number' || kind === 'integer') {
    const range = field.minimum !== undefined && field.maximum !== undefined ? ` between ${field.minimum} and ${field.maximum}` : '';
    parts.push(`${kind === 'integer' ? 'Whole number' : 'Number, with a point as the decimal separator'}${range}`);
  } else parts.push('Text');
  if (field.kind === 'array') parts.push(`several values are separated by ${network.csvArrayDelimiter}`);
  if (field.externalId) parts.push('your own id for this row; a row whose id was already onboarded is skipped');
  if (field.location) parts.push('give both latitude and longitude, or neither');
  return parts.join('; ');
}

function addInstructions(workbook: ExcelJS.Workbook, network: Network, domain: Domain, closedSetNames: string[]): void {
  const sheet = workbook.addWorksheet(TEMPLATE_SHEETS.instructions);
  sheet.columns = [{ width: 26 }, { width: 30 }, { width: 10 }, { width: 80 }, { width: 36 }];
  const title = sheet.addRow([`${network.name}: bulk-upload template for ${domain.label} participants (schema ${domain.schemaId}, version ${domain.schemaVersion})`]);
  title.font = { bold: true, size: 14 };
  const lines = [
    `1. Fill in the "${TEMPLATE_SHEETS.grid}" tab: one participant per row, starting on row 2. Keep its header row as it is.`,
    `2. Required columns have a bold header on a yellow background; a row missing one of them is not onboarded. Other columns may stay empty.`,
    `3. Columns with a fixed set of values (${closedSetNames.join(', ') || 'none'}) have a dropdown fed from the "${TEMPLATE_SHEETS.allowedValues}" tab (on the first ${TEMPLATE_GRID_ROWS.toLocaleString('en')} rows).`,
    `4. Several values in one cell (list columns): separate them with ${network.csvArrayDelimiter}, e.g. Hindi${network.csvArrayDelimiter}Punjabi.`,
    `5. Phone numbers: with +country code, or without it for numbers of the network's country (${network.defaultPhoneRegion}); spaces and dashes are fine.`,
    `6. See the "${TEMPLATE_SHEETS.samples}" tab for worked examples; do not upload them.`,
    `7. Save as .xlsx (or as "CSV UTF-8"), upload it as a bulk upload of participant type ${domain.name}, then start the upload. Rows that fail are listed, with the reason, in the upload's error report (a CSV): correct them there and upload that file again.`,
  ];
  for (const line of lines) sheet.addRow([line]);
  sheet.addRow([]);
  const header = sheet.addRow(['Column', 'Meaning', 'Required', 'What to enter', 'Example']);
  styleHeader(header);
  const example = exampleProfile(domain);
  for (const field of domain.fields) {
    const row = sheet.addRow([
      field.name,
      field.description ? `${field.label}: ${field.description}` : field.label,
      field.required ? 'yes' : '',
      howToFill(network, field),
      templateCell(network, example[field.name]),
    ]);
    row.alignment = { wrapText: true, vertical: 'top' };
    if (field.required) row.getCell(1).font = { bold: true };
  }
}

/** Header row bold, required columns highlighted; string columns formatted as text so Excel keeps leading zeros and +. */
function styleGridColumns(sheet: ExcelJS.Worksheet, domain: Domain): void {
  styleHeader(sheet.getRow(1));
  domain.fields.forEach((field, i) => {
    const column = sheet.getColumn(i + 1);
    column.width = Math.max(14, Math.min(40, field.name.length + 4));
    if (field.kind === 'string' && !field.enum) column.numFmt = '@';
    if (field.required) sheet.getRow(1).getCell(i + 1).fill = REQUIRED_FILL;
  });
}

function styleHeader(row: ExcelJS.Row): void {
  row.font = { bold: true };
  row.eachCell((cell) => {
    cell.fill = HEADER_FILL;
  });
}

/** The grid's data validation of a column: a dropdown for closed sets, a range check for bounded numbers. */
function gridValidation(network: Network, field: FieldInfo, listRange: string | undefined): ExcelJS.DataValidation | null {
  if (listRange) {
    const several = field.kind === 'array';
    return {
      type: 'list', allowBlank: true, formulae: [listRange], showErrorMessage: true,
      // A list column holds several values joined by the delimiter, which a dropdown cannot offer: warn only.
      errorStyle: several ? 'information' : 'stop',
      errorTitle: field.name,
      error: several
        ? `Pick a value, or type several separated by ${network.csvArrayDelimiter}; each must be in the ${TEMPLATE_SHEETS.allowedValues} tab.`
        : `${field.name} must be one of the values in the ${TEMPLATE_SHEETS.allowedValues} tab.`,
    };
  }
  if ((field.kind === 'number' || field.kind === 'integer') && field.minimum !== undefined && field.maximum !== undefined) {
    return {
      type: field.kind === 'integer' ? 'whole' : 'decimal', operator: 'between', allowBlank: true,
      formulae: [field.minimum, field.maximum], showErrorMessage: true, errorStyle: 'stop', errorTitle: field.name,
      error: `${field.name} must be ${field.kind === 'integer' ? 'a whole number' : 'a number'} between ${field.minimum} and ${field.maximum}.`,
    };
  }
  return null;
}

/** Realistic sample profiles of fixtures/template-samples/<network>.json (none when the network has no file), validated. */
async function sampleProfiles(network: Network, domain: Domain): Promise<Record<string, unknown>[]> {
  let text: string;
  try {
    text = await readFile(new URL(`${network.id}.json`, SAMPLES_DIR), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const samples = (JSON.parse(text) as Record<string, Record<string, unknown>[]>)[domain.name] ?? [];
  samples.forEach((sample, i) => {
    if (!domain.validate(sample)) {
      throw new Error(`fixtures/template-samples/${network.id}.json: ${domain.name}[${i}] is not a valid ${domain.name} profile: ${JSON.stringify(domain.validate.errors)}`);
    }
  });
  return samples;
}
