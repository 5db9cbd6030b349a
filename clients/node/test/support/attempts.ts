import { InterceptingCall } from "@grpc/grpc-js";
import type { Interceptor } from "@grpc/grpc-js";

/** One attempt of a call as the channel saw it leave: the method's path and its gRPC deadline. */
export interface Attempt {
  readonly method: string;
  readonly deadline: Date | number | undefined;
}

/**
 * A grpc-js client interceptor recording every call attempt (each retry is a call of its own),
 * so that tests count attempts instead of inferring them from timing.
 */
export class AttemptRecorder {
  readonly attempts: Attempt[] = [];
  readonly interceptor: Interceptor = (options, nextCall) => {
    this.attempts.push({ method: options.method_definition.path, deadline: options.deadline });
    return new InterceptingCall(nextCall(options));
  };

  of(method: string): Attempt[] {
    return this.attempts.filter((attempt) => attempt.method === `/tickd.v1.Timers/${method}`);
  }
}
