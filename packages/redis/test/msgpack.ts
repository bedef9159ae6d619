/**
 * A MessagePack decoder for what Redis' cmsgpack writes (nil, booleans, integers, floats,
 * strings, arrays, maps), so tests can read the stored state exactly.
 */
export type Packed = null | boolean | number | string | Packed[] | { [key: string]: Packed };

export function unpack(buf: Buffer): Packed {
  let at = 0;
  const str = (n: number): string => {
    const s = buf.toString('utf8', at, at + n);
    at += n;
    return s;
  };
  const arr = (n: number): Packed[] => Array.from({ length: n }, () => read());
  const map = (n: number): { [key: string]: Packed } => {
    const out: { [key: string]: Packed } = {};
    for (let i = 0; i < n; i++) out[JSON.stringify(read())] = read();
    return out;
  };
  const read = (): Packed => {
    const b = buf[at++]!;
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0xa0 && b <= 0xbf) return str(b - 0xa0);
    if (b >= 0x90 && b <= 0x9f) return arr(b - 0x90);
    if (b >= 0x80 && b <= 0x8f) return map(b - 0x80);
    const take = <T>(n: number, f: (o: number) => T): T => {
      const v = f(at);
      at += n;
      return v;
    };
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xca:
        return take(4, (o) => buf.readFloatBE(o));
      case 0xcb:
        return take(8, (o) => buf.readDoubleBE(o));
      case 0xcc:
        return take(1, (o) => buf.readUInt8(o));
      case 0xcd:
        return take(2, (o) => buf.readUInt16BE(o));
      case 0xce:
        return take(4, (o) => buf.readUInt32BE(o));
      case 0xcf:
        return take(8, (o) => Number(buf.readBigUInt64BE(o)));
      case 0xd0:
        return take(1, (o) => buf.readInt8(o));
      case 0xd1:
        return take(2, (o) => buf.readInt16BE(o));
      case 0xd2:
        return take(4, (o) => buf.readInt32BE(o));
      case 0xd3:
        return take(8, (o) => Number(buf.readBigInt64BE(o)));
      case 0xd9:
        return str(take(1, (o) => buf.readUInt8(o)));
      case 0xda:
        return str(take(2, (o) => buf.readUInt16BE(o)));
      case 0xdb:
        return str(take(4, (o) => buf.readUInt32BE(o)));
      case 0xdc:
        return arr(take(2, (o) => buf.readUInt16BE(o)));
      case 0xdd:
        return arr(take(4, (o) => buf.readUInt32BE(o)));
      case 0xde:
        return map(take(2, (o) => buf.readUInt16BE(o)));
      default:
        throw new Error(`msgpack type 0x${b.toString(16)} at ${at - 1} is not expected here`);
    }
  };
  const value = read();
  if (at !== buf.length) throw new Error(`msgpack: ${buf.length - at} trailing bytes`);
  return value;
}

/**
 * Encodes an array of numbers and strings, numbers that are not 32-bit integers as float64:
 * lets tests send the script what the store itself never would.
 */
export function packAny(values: readonly (number | string)[]): Buffer {
  const parts: Buffer[] = [Buffer.from([0xdd, 0, 0, 0, 0])];
  parts[0]!.writeUInt32BE(values.length, 1);
  for (const v of values) {
    if (typeof v === 'string') {
      const s = Buffer.from(v, 'utf8');
      const head = Buffer.alloc(5);
      head[0] = 0xdb;
      head.writeUInt32BE(s.length, 1);
      parts.push(head, s);
    } else if (Number.isInteger(v) && v >= -(2 ** 31) && v < 2 ** 31) {
      const b = Buffer.alloc(5);
      b[0] = 0xd2;
      b.writeInt32BE(v, 1);
      parts.push(b);
    } else {
      const b = Buffer.alloc(9);
      b[0] = 0xcb;
      b.writeDoubleBE(v, 1);
      parts.push(b);
    }
  }
  return Buffer.concat(parts);
}
