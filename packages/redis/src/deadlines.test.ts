import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Deadlines, type Deadline } from './deadlines.js';

describe('Deadlines', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('fires each deadline once it has passed, in order, unless cancelled first', () => {
    const d = new Deadlines();
    const fired: string[] = [];
    d.add(30, () => fired.push('a'));
    const b = d.add(10, () => fired.push('b'));
    d.add(20, () => fired.push('c'));
    vi.advanceTimersByTime(9);
    expect(fired).toEqual([]);
    d.cancel(b);
    vi.advanceTimersByTime(11);
    expect(fired).toEqual(['c']);
    vi.advanceTimersByTime(10);
    expect(fired).toEqual(['c', 'a']);
    vi.advanceTimersByTime(100);
    expect(fired).toEqual(['c', 'a']);
  });

  it('uses one timer for many calls: a later deadline arms nothing new', () => {
    const d = new Deadlines();
    const fired: number[] = [];
    d.add(50, () => fired.push(0));
    for (let i = 1; i <= 100; i++) d.cancel(d.add(50 + i, () => fired.push(i)));
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(200);
    expect(fired).toEqual([0]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('fires deadlines due together oldest first; one may cancel another due with it, or add one', () => {
    const d = new Deadlines();
    const fired: string[] = [];
    const handles: Deadline[] = [];
    d.add(5, () => {
      fired.push('first');
      d.cancel(handles[0]!);
      d.add(50, () => fired.push('added'));
    });
    handles.push(d.add(5, () => fired.push('cancelled')));
    d.add(5, () => fired.push('third'));
    vi.advanceTimersByTime(20);
    expect(fired).toEqual(['first', 'third']);
    vi.advanceTimersByTime(50);
    expect(fired).toEqual(['first', 'third', 'added']);
    // Cancelling again, or after firing, changes nothing.
    d.cancel(handles[0]!);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('clear drops every deadline and its timer', () => {
    const d = new Deadlines();
    const fire = vi.fn();
    d.add(5, fire);
    d.clear();
    vi.advanceTimersByTime(50);
    expect(fire).not.toHaveBeenCalled();
    expect(vi.getTimerCount()).toBe(0);
  });
});
