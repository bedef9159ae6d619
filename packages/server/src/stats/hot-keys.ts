/**
 * The hot keys of `GET /v1/stats` as text, for `sluice status`. Keys are the callers' own: they
 * are shown quoted when they hold anything but printable characters (so no key can move the
 * terminal's cursor or colour it) and cut to {@link SHOWN_KEY_LENGTH} characters.
 */
import type { HotKeyReport } from '@sluice/core';

/** Most characters of a key shown. */
export const SHOWN_KEY_LENGTH = 48;

/** A caller key made safe to print. */
export function shownKey(key: string): string {
  const cut = key.length > SHOWN_KEY_LENGTH ? `${key.slice(0, SHOWN_KEY_LENGTH - 1)}…` : key;
  // eslint-disable-next-line no-control-regex -- control characters are what is looked for
  return /^[^\u0000-\u001f\u007f-\u009f"]*$/u.test(cut) && cut !== '' ? cut : JSON.stringify(cut);
}

/** The hot-key section of the status view: one block per resource, heaviest keys first. */
export function hotKeyLines(
  reports: readonly (HotKeyReport & { readonly keysHidden?: boolean })[] | undefined,
  top: number,
): string[] {
  if (reports === undefined || reports.length === 0) return [];
  const lines = ['', 'HOT KEYS'];
  for (const r of reports) {
    lines.push(`${r.resource}  ${Math.round(r.calls)} calls in ${r.windowMs / 1000} s, ${r.mitigated} mitigated`);
    if (r.keysHidden === true) {
      lines.push('  (keys are named only to the admin: pass --token or SLUICE_ADMIN_TOKEN)');
      continue;
    }
    const keys = r.keys.slice(0, top);
    if (keys.length === 0) lines.push('  (no calls in the window)');
    const rows = keys.map((k) => [
      shownKey(k.key),
      k.rate.toFixed(1),
      `${(k.share * 100).toFixed(1)}%`,
      k.error > 0 ? `±${Math.round(k.error)}` : '',
      k.mitigation ?? '',
    ]);
    const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((row) => row[i]!.length)));
    for (const row of rows) {
      lines.push(
        `  ${row[0]!.padEnd(widths[0]!)}  ${row[1]!.padStart(widths[1]!)}/s  ${row[2]!.padStart(widths[2]!)}  ${row[3]!.padEnd(widths[3]!)}  ${row[4]}`.trimEnd(),
      );
    }
  }
  return lines;
}
