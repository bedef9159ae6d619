import { isMap, isSeq, parseDocument } from 'yaml';
import { adaptiveLimitIndex } from './adaptive.js';
import { compileRules } from './ruleset.js';
import { formatOf } from './parse.js';

/** Which limit {@link setLimitInText} changes. */
export interface LimitLocation {
  readonly resource: string;
  /** The limit's id, or its position as a string (see `adaptive.<resource>.limit`). */
  readonly limit: string;
}

/**
 * The rule text with one limit's `limit` set to `value`, everything else as written: comments,
 * order and formatting of YAML stay (the moves of an adaptive limit are versions whose diff
 * is that one line). Throws `SLUICE_ERR_INVALID_RULES` when the text (before or after) is not a
 * valid rule file, and a `RangeError` when it has no such limit.
 */
export function setLimitInText(text: string, file: string, at: LimitLocation, value: number): string {
  const ruleSet = compileRules(text, { file });
  const resource = ruleSet.resources[at.resource];
  const index = resource === undefined ? -1 : adaptiveLimitIndex(resource.limits, at.limit);
  if (resource === undefined || index < 0) {
    throw new RangeError(`no limit ${JSON.stringify(at.limit)} on resource ${JSON.stringify(at.resource)} in ${file}`);
  }
  let next: string;
  if (formatOf(file) === 'json') {
    const data = JSON.parse(text) as { resources: Record<string, { limits: unknown }> };
    const r = data.resources[at.resource]!;
    const entry = (Array.isArray(r.limits) ? r.limits[index] : r.limits) as { limit: number };
    entry.limit = value;
    next = `${JSON.stringify(data, null, 2)}\n`;
  } else {
    const doc = parseDocument(text);
    const limits = doc.getIn(['resources', at.resource, 'limits'], true);
    const path = isSeq(limits)
      ? ['resources', at.resource, 'limits', index, 'limit']
      : ['resources', at.resource, 'limits', 'limit'];
    if (!isSeq(limits) && !isMap(limits)) throw new RangeError(`resources.${at.resource}.limits is not a mapping or a list`);
    doc.setIn(path, value);
    next = doc.toString();
  }
  compileRules(next, { file });
  return next;
}
