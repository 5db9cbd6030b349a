/**
 * Waiting without sleeping as synchronisation: a test waits for an event (or for a condition
 * re-checked whenever something it depends on happened), with a generous overall deadline so
 * that a broken build fails instead of hanging. Deadlines are never timing assertions.
 */
export const PATIENCE_MS = 60_000;

/**
 * A condition re-checked on every notify(): `until(predicate)` resolves the first time the
 * predicate holds. Tests call notify() from event listeners.
 */
export class Condition {
  private readonly waiters = new Set<() => void>();

  notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  until(what: string, predicate: () => boolean, timeoutMs = PATIENCE_MS): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        let holds: boolean;
        try {
          holds = predicate();
        } catch (error) {
          finish();
          reject(error);
          return;
        }
        if (!holds) return;
        finish();
        resolve();
      };
      const timeout = setTimeout(() => {
        finish();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timeout);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }
}

/**
 * For a state that lives on the server and has no event (a pending count reaching 0): asks
 * again after each answer until the predicate holds. Polling, not sleeping: the pause between
 * questions only spares the server.
 */
export async function pollUntil<T>(
  what: string,
  question: () => Promise<T>,
  predicate: (answer: T) => boolean,
  timeoutMs = PATIENCE_MS,
): Promise<T> {
  const giveUpAt = Date.now() + timeoutMs;
  for (;;) {
    const answer = await question();
    if (predicate(answer)) return answer;
    if (Date.now() > giveUpAt) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last answer: ${JSON.stringify(answer)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A promise with its resolve function outside, to open a gate from a test. */
export class Gate {
  readonly opened: Promise<void>;
  open!: () => void;
  constructor() {
    this.opened = new Promise((resolve) => {
      this.open = resolve;
    });
  }
}

/** Resolves after `milliseconds` of wall-clock time (for scenarios that are about time passing). */
export function wallClockPasses(milliseconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, milliseconds)));
}
