/** A printable table: a title, a header row and rows of cells already formatted. */
export interface Table {
  readonly title: string;
  readonly header: readonly string[];
  readonly rows: readonly (readonly string[])[];
  /** Lines printed under the table. */
  readonly notes?: readonly string[];
  /** Column alignment. @default the first column left, the others right */
  readonly align?: readonly ('left' | 'right')[];
}

/** Renders a table as aligned plain-text columns (readable in a terminal and as Markdown code). */
export function renderTable(table: Table): string {
  const widths = table.header.map((h, i) => Math.max(h.length, ...table.rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) =>
        (table.align?.[i] ?? (i === 0 ? 'left' : 'right')) === 'left' ? c.padEnd(widths[i]!) : c.padStart(widths[i]!),
      )
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  const out = [`## ${table.title}`, '', line(table.header), rule, ...table.rows.map(line)];
  if (table.notes !== undefined && table.notes.length > 0) out.push('', ...table.notes);
  return out.join('\n') + '\n';
}

/** Integer with thousands separators. */
export function fmtInt(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : String(n);
}

/** Fixed decimals. */
export function fmt(n: number, digits = 1): string {
  return Number.isFinite(n) ? n.toFixed(digits) : String(n);
}

/** A ratio as `2.31x`. */
export function fmtRatio(n: number): string {
  return Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a';
}
