// A chart's numbers as a file: the rows it plots, exactly, as CSV or JSON.
import type { ChartTable } from './Chart';

function csvCell(v: number | string | null): string {
  if (v == null) return '';
  const s = String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCsv(table: ChartTable): string {
  const lines = [table.columns.map(csvCell).join(',')];
  for (const row of table.rows) lines.push(row.map(csvCell).join(','));
  return `${lines.join('\n')}\n`;
}

// One object per row, keyed by column.
export function toJson(table: ChartTable, title: string): string {
  const rows = table.rows.map((row) => Object.fromEntries(table.columns.map((c, i) => [c, row[i] ?? null])));
  return `${JSON.stringify({ chart: title, columns: table.columns, rows }, null, 1)}\n`;
}

export function saveFile(name: string, text: string, type: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  // The download has taken the blob once the click's task is over.
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

// A file name from a chart's title: letters, digits, dots and dashes.
export function fileName(title: string, ext: string): string {
  return `${title.replace(/[^\w.-]+/g, '_').replace(/^_+|_+$/g, '') || 'chart'}.${ext}`;
}
