/**
 * Server-side SVG bar charts for the console dashboard (no chart library in the page): one
 * horizontal bar per value, labelled, with a <title> and role="img" so that screen readers
 * announce the chart and each bar (WAI-ARIA "img" role; SVG 1.1 <title>).
 */
const escape = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export interface Bar {
  label: string;
  value: number;
}

/** An SVG of `bars` (values ≥ 0) titled `title`; width 480, 28 px per bar. */
export function barChart(title: string, bars: Bar[]): string {
  const width = 480;
  const labelWidth = 150;
  const valueWidth = 60;
  const rowHeight = 28;
  const height = bars.length * rowHeight + 8;
  const max = Math.max(1, ...bars.map((b) => b.value));
  const rows = bars.map((b, i) => {
    const y = 4 + i * rowHeight;
    const w = Math.round(((width - labelWidth - valueWidth) * b.value) / max);
    return `<g><title>${escape(`${b.label}: ${b.value}`)}</title>`
      + `<text x="${labelWidth - 8}" y="${y + 18}" text-anchor="end" font-size="13" fill="#1f2933">${escape(b.label)}</text>`
      + `<rect x="${labelWidth}" y="${y + 4}" width="${w}" height="${rowHeight - 10}" fill="#1d4ed8"/>`
      + `<text x="${labelWidth + w + 6}" y="${y + 18}" font-size="13" fill="#1f2933">${b.value}</text></g>`;
  }).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${escape(title)}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"><title>${escape(title)}</title>${rows}</svg>`;
}
