import type { CallOptions as GrpcCallOptions, ClientUnaryCall, Metadata, ServiceError } from "@grpc/grpc-js";
import { TickdError } from "./errors";

/** The shape of every unary method of the generated TimersClient (the overload with all arguments). */
export type UnaryMethod<Request, Response> = (
  request: Request,
  metadata: Metadata,
  options: Partial<GrpcCallOptions>,
  callback: (error: ServiceError | null, response: Response) => void,
) => ClientUnaryCall;

/**
 * One attempt of a unary call as a Promise, with a deadline (the whole call's, retries
 * included: see callWithRetries), and cancelled when `signal`
 * aborts. Failures reject with a TickdError.
 */
export function callOnce<Request, Response>(
  method: UnaryMethod<Request, Response>,
  request: Request,
  metadata: Metadata,
  deadline: Date,
  signal?: AbortSignal,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const call = method(request, metadata, { deadline }, (error, response) => {
      signal?.removeEventListener("abort", onAbort);
      if (error) reject(TickdError.fromServiceError(error));
      else resolve(response);
    });
    function onAbort(): void {
      call.cancel();
    }
    if (signal?.aborted) call.cancel();
    else signal?.addEventListener("abort", onAbort, { once: true });
  });
}
