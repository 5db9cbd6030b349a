import { Metadata, status as GrpcStatus } from "@grpc/grpc-js";
import type { ServiceError } from "@grpc/grpc-js";
import type { Error as ItemErrorMessage } from "./gen/tickd/v1/tickd";

/** The gRPC status codes, re-exported so callers can compare `error.code` without importing grpc-js. */
export { GrpcStatus as Status };

/**
 * An error from tickd (or from reaching it), carrying the gRPC status code and the server's
 * message. Thrown by every call of the client; also used for a batch item that failed alone
 * and for a heartbeat the server refused, so callers handle one error type everywhere.
 */
export class TickdError extends Error {
  /** The gRPC status code (compare with `Status.NOT_FOUND`, ...). */
  readonly code: GrpcStatus;
  /** The code's name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** The server's message alone, without the code prefix that `message` carries. */
  readonly details: string;
  /** Trailing metadata of the failed call, when there was a call. */
  readonly metadata: Metadata | undefined;

  constructor(code: GrpcStatus, details: string, metadata?: Metadata, options?: { cause?: unknown }) {
    super(`${statusName(code)}: ${details}`, options);
    this.name = "TickdError";
    this.code = code;
    this.codeName = statusName(code);
    this.details = details;
    this.metadata = metadata;
  }

  /** Wraps what grpc-js passed to a callback or emitted on a stream. */
  static fromServiceError(error: ServiceError | Error): TickdError {
    if (error instanceof TickdError) return error;
    const serviceError = error as Partial<ServiceError>;
    if (typeof serviceError.code === "number") {
      return new TickdError(serviceError.code, serviceError.details ?? error.message, serviceError.metadata, {
        cause: error,
      });
    }
    return new TickdError(GrpcStatus.UNKNOWN, error.message, undefined, { cause: error });
  }

  /** A per-item failure from a batch answer or a KeepAlive answer. */
  static fromItemError(error: ItemErrorMessage): TickdError {
    return new TickdError(error.code as GrpcStatus, error.message);
  }
}

/** "NOT_FOUND" for 5, and so on; the number itself for a code grpc-js does not know. */
export function statusName(code: number): string {
  return GrpcStatus[code] ?? String(code);
}
