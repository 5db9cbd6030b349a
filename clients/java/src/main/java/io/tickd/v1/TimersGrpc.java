package io.tickd.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: tickd/v1/tickd.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class TimersGrpc {

  private TimersGrpc() {}

  public static final String SERVICE_NAME = "tickd.v1.Timers";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutRequest,
      io.tickd.v1.NewTimeoutResponse> getNewTimeoutMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NewTimeout",
      requestType = io.tickd.v1.NewTimeoutRequest.class,
      responseType = io.tickd.v1.NewTimeoutResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutRequest,
      io.tickd.v1.NewTimeoutResponse> getNewTimeoutMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutRequest, io.tickd.v1.NewTimeoutResponse> getNewTimeoutMethod;
    if ((getNewTimeoutMethod = TimersGrpc.getNewTimeoutMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getNewTimeoutMethod = TimersGrpc.getNewTimeoutMethod) == null) {
          TimersGrpc.getNewTimeoutMethod = getNewTimeoutMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.NewTimeoutRequest, io.tickd.v1.NewTimeoutResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NewTimeout"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.NewTimeoutRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.NewTimeoutResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("NewTimeout"))
              .build();
        }
      }
    }
    return getNewTimeoutMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutsRequest,
      io.tickd.v1.NewTimeoutsResponse> getNewTimeoutsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NewTimeouts",
      requestType = io.tickd.v1.NewTimeoutsRequest.class,
      responseType = io.tickd.v1.NewTimeoutsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutsRequest,
      io.tickd.v1.NewTimeoutsResponse> getNewTimeoutsMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.NewTimeoutsRequest, io.tickd.v1.NewTimeoutsResponse> getNewTimeoutsMethod;
    if ((getNewTimeoutsMethod = TimersGrpc.getNewTimeoutsMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getNewTimeoutsMethod = TimersGrpc.getNewTimeoutsMethod) == null) {
          TimersGrpc.getNewTimeoutsMethod = getNewTimeoutsMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.NewTimeoutsRequest, io.tickd.v1.NewTimeoutsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NewTimeouts"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.NewTimeoutsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.NewTimeoutsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("NewTimeouts"))
              .build();
        }
      }
    }
    return getNewTimeoutsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.CancelRequest,
      io.tickd.v1.CancelResponse> getCancelMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Cancel",
      requestType = io.tickd.v1.CancelRequest.class,
      responseType = io.tickd.v1.CancelResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.CancelRequest,
      io.tickd.v1.CancelResponse> getCancelMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.CancelRequest, io.tickd.v1.CancelResponse> getCancelMethod;
    if ((getCancelMethod = TimersGrpc.getCancelMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getCancelMethod = TimersGrpc.getCancelMethod) == null) {
          TimersGrpc.getCancelMethod = getCancelMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.CancelRequest, io.tickd.v1.CancelResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Cancel"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.CancelRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.CancelResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Cancel"))
              .build();
        }
      }
    }
    return getCancelMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.PendingRequest,
      io.tickd.v1.PendingResponse> getPendingMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Pending",
      requestType = io.tickd.v1.PendingRequest.class,
      responseType = io.tickd.v1.PendingResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.PendingRequest,
      io.tickd.v1.PendingResponse> getPendingMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.PendingRequest, io.tickd.v1.PendingResponse> getPendingMethod;
    if ((getPendingMethod = TimersGrpc.getPendingMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getPendingMethod = TimersGrpc.getPendingMethod) == null) {
          TimersGrpc.getPendingMethod = getPendingMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.PendingRequest, io.tickd.v1.PendingResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Pending"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.PendingRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.PendingResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Pending"))
              .build();
        }
      }
    }
    return getPendingMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.GetRequest,
      io.tickd.v1.GetResponse> getGetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Get",
      requestType = io.tickd.v1.GetRequest.class,
      responseType = io.tickd.v1.GetResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.GetRequest,
      io.tickd.v1.GetResponse> getGetMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.GetRequest, io.tickd.v1.GetResponse> getGetMethod;
    if ((getGetMethod = TimersGrpc.getGetMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getGetMethod = TimersGrpc.getGetMethod) == null) {
          TimersGrpc.getGetMethod = getGetMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.GetRequest, io.tickd.v1.GetResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Get"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.GetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.GetResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Get"))
              .build();
        }
      }
    }
    return getGetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.TouchRequest,
      io.tickd.v1.TouchResponse> getTouchMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Touch",
      requestType = io.tickd.v1.TouchRequest.class,
      responseType = io.tickd.v1.TouchResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.TouchRequest,
      io.tickd.v1.TouchResponse> getTouchMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.TouchRequest, io.tickd.v1.TouchResponse> getTouchMethod;
    if ((getTouchMethod = TimersGrpc.getTouchMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getTouchMethod = TimersGrpc.getTouchMethod) == null) {
          TimersGrpc.getTouchMethod = getTouchMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.TouchRequest, io.tickd.v1.TouchResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Touch"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.TouchRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.TouchResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Touch"))
              .build();
        }
      }
    }
    return getTouchMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.KeepAliveRequest,
      io.tickd.v1.KeepAliveResponse> getKeepAliveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "KeepAlive",
      requestType = io.tickd.v1.KeepAliveRequest.class,
      responseType = io.tickd.v1.KeepAliveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<io.tickd.v1.KeepAliveRequest,
      io.tickd.v1.KeepAliveResponse> getKeepAliveMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.KeepAliveRequest, io.tickd.v1.KeepAliveResponse> getKeepAliveMethod;
    if ((getKeepAliveMethod = TimersGrpc.getKeepAliveMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getKeepAliveMethod = TimersGrpc.getKeepAliveMethod) == null) {
          TimersGrpc.getKeepAliveMethod = getKeepAliveMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.KeepAliveRequest, io.tickd.v1.KeepAliveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "KeepAlive"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.KeepAliveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.KeepAliveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("KeepAlive"))
              .build();
        }
      }
    }
    return getKeepAliveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.SubscribeRequest,
      io.tickd.v1.SubscribeResponse> getSubscribeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Subscribe",
      requestType = io.tickd.v1.SubscribeRequest.class,
      responseType = io.tickd.v1.SubscribeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.tickd.v1.SubscribeRequest,
      io.tickd.v1.SubscribeResponse> getSubscribeMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.SubscribeRequest, io.tickd.v1.SubscribeResponse> getSubscribeMethod;
    if ((getSubscribeMethod = TimersGrpc.getSubscribeMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getSubscribeMethod = TimersGrpc.getSubscribeMethod) == null) {
          TimersGrpc.getSubscribeMethod = getSubscribeMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.SubscribeRequest, io.tickd.v1.SubscribeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Subscribe"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SubscribeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SubscribeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Subscribe"))
              .build();
        }
      }
    }
    return getSubscribeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.AckRequest,
      io.tickd.v1.AckResponse> getAckMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Ack",
      requestType = io.tickd.v1.AckRequest.class,
      responseType = io.tickd.v1.AckResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.AckRequest,
      io.tickd.v1.AckResponse> getAckMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.AckRequest, io.tickd.v1.AckResponse> getAckMethod;
    if ((getAckMethod = TimersGrpc.getAckMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getAckMethod = TimersGrpc.getAckMethod) == null) {
          TimersGrpc.getAckMethod = getAckMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.AckRequest, io.tickd.v1.AckResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Ack"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.AckRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.AckResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Ack"))
              .build();
        }
      }
    }
    return getAckMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.RescheduleRequest,
      io.tickd.v1.RescheduleResponse> getRescheduleMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Reschedule",
      requestType = io.tickd.v1.RescheduleRequest.class,
      responseType = io.tickd.v1.RescheduleResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.RescheduleRequest,
      io.tickd.v1.RescheduleResponse> getRescheduleMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.RescheduleRequest, io.tickd.v1.RescheduleResponse> getRescheduleMethod;
    if ((getRescheduleMethod = TimersGrpc.getRescheduleMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getRescheduleMethod = TimersGrpc.getRescheduleMethod) == null) {
          TimersGrpc.getRescheduleMethod = getRescheduleMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.RescheduleRequest, io.tickd.v1.RescheduleResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Reschedule"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RescheduleRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RescheduleResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Reschedule"))
              .build();
        }
      }
    }
    return getRescheduleMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.RedriveRequest,
      io.tickd.v1.RedriveResponse> getRedriveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Redrive",
      requestType = io.tickd.v1.RedriveRequest.class,
      responseType = io.tickd.v1.RedriveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.RedriveRequest,
      io.tickd.v1.RedriveResponse> getRedriveMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.RedriveRequest, io.tickd.v1.RedriveResponse> getRedriveMethod;
    if ((getRedriveMethod = TimersGrpc.getRedriveMethod) == null) {
      synchronized (TimersGrpc.class) {
        if ((getRedriveMethod = TimersGrpc.getRedriveMethod) == null) {
          TimersGrpc.getRedriveMethod = getRedriveMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.RedriveRequest, io.tickd.v1.RedriveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Redrive"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RedriveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RedriveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new TimersMethodDescriptorSupplier("Redrive"))
              .build();
        }
      }
    }
    return getRedriveMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static TimersStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<TimersStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<TimersStub>() {
        @java.lang.Override
        public TimersStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new TimersStub(channel, callOptions);
        }
      };
    return TimersStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static TimersBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<TimersBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<TimersBlockingStub>() {
        @java.lang.Override
        public TimersBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new TimersBlockingStub(channel, callOptions);
        }
      };
    return TimersBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static TimersFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<TimersFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<TimersFutureStub>() {
        @java.lang.Override
        public TimersFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new TimersFutureStub(channel, callOptions);
        }
      };
    return TimersFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class TimersImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Registers one timer.
     * </pre>
     */
    public void newTimeout(io.tickd.v1.NewTimeoutRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNewTimeoutMethod(), responseObserver);
    }

    /**
     * <pre>
     * Registers a batch; one result per item, an invalid item fails alone.
     * </pre>
     */
    public void newTimeouts(io.tickd.v1.NewTimeoutsRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNewTimeoutsMethod(), responseObserver);
    }

    /**
     * <pre>
     * Cancels a timer by id or key; says whether it was still pending.
     * </pre>
     */
    public void cancel(io.tickd.v1.CancelRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.CancelResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCancelMethod(), responseObserver);
    }

    /**
     * <pre>
     * Counts pending timers and lists them a page at a time.
     * </pre>
     */
    public void pending(io.tickd.v1.PendingRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.PendingResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPendingMethod(), responseObserver);
    }

    /**
     * <pre>
     * One pending timer's state and time remaining.
     * </pre>
     */
    public void get(io.tickd.v1.GetRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.GetResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Heartbeat: pushes a timer's deadline to now + its ttl (or the ttl given).
     * </pre>
     */
    public void touch(io.tickd.v1.TouchRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.TouchResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getTouchMethod(), responseObserver);
    }

    /**
     * <pre>
     * Heartbeats for many timers over one stream, each answered with its new deadline.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.tickd.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<io.tickd.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getKeepAliveMethod(), responseObserver);
    }

    /**
     * <pre>
     * Expirations of a namespace as they fire.
     * </pre>
     */
    public void subscribe(io.tickd.v1.SubscribeRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SubscribeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSubscribeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Acknowledges delivered expirations.
     * </pre>
     */
    public void ack(io.tickd.v1.AckRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.AckResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAckMethod(), responseObserver);
    }

    /**
     * <pre>
     * Moves a pending timer's next firing (and optionally replaces its payload).
     * </pre>
     */
    public void reschedule(io.tickd.v1.RescheduleRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RescheduleResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRescheduleMethod(), responseObserver);
    }

    /**
     * <pre>
     * Sends dead expirations back to delivery, their attempts counted afresh.
     * </pre>
     */
    public void redrive(io.tickd.v1.RedriveRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RedriveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRedriveMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getNewTimeoutMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.NewTimeoutRequest,
                io.tickd.v1.NewTimeoutResponse>(
                  this, METHODID_NEW_TIMEOUT)))
          .addMethod(
            getNewTimeoutsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.NewTimeoutsRequest,
                io.tickd.v1.NewTimeoutsResponse>(
                  this, METHODID_NEW_TIMEOUTS)))
          .addMethod(
            getCancelMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.CancelRequest,
                io.tickd.v1.CancelResponse>(
                  this, METHODID_CANCEL)))
          .addMethod(
            getPendingMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.PendingRequest,
                io.tickd.v1.PendingResponse>(
                  this, METHODID_PENDING)))
          .addMethod(
            getGetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.GetRequest,
                io.tickd.v1.GetResponse>(
                  this, METHODID_GET)))
          .addMethod(
            getTouchMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.TouchRequest,
                io.tickd.v1.TouchResponse>(
                  this, METHODID_TOUCH)))
          .addMethod(
            getKeepAliveMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                io.tickd.v1.KeepAliveRequest,
                io.tickd.v1.KeepAliveResponse>(
                  this, METHODID_KEEP_ALIVE)))
          .addMethod(
            getSubscribeMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.tickd.v1.SubscribeRequest,
                io.tickd.v1.SubscribeResponse>(
                  this, METHODID_SUBSCRIBE)))
          .addMethod(
            getAckMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.AckRequest,
                io.tickd.v1.AckResponse>(
                  this, METHODID_ACK)))
          .addMethod(
            getRescheduleMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.RescheduleRequest,
                io.tickd.v1.RescheduleResponse>(
                  this, METHODID_RESCHEDULE)))
          .addMethod(
            getRedriveMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.RedriveRequest,
                io.tickd.v1.RedriveResponse>(
                  this, METHODID_REDRIVE)))
          .build();
    }
  }

  /**
   */
  public static final class TimersStub extends io.grpc.stub.AbstractAsyncStub<TimersStub> {
    private TimersStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected TimersStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new TimersStub(channel, callOptions);
    }

    /**
     * <pre>
     * Registers one timer.
     * </pre>
     */
    public void newTimeout(io.tickd.v1.NewTimeoutRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNewTimeoutMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Registers a batch; one result per item, an invalid item fails alone.
     * </pre>
     */
    public void newTimeouts(io.tickd.v1.NewTimeoutsRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNewTimeoutsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Cancels a timer by id or key; says whether it was still pending.
     * </pre>
     */
    public void cancel(io.tickd.v1.CancelRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.CancelResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCancelMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Counts pending timers and lists them a page at a time.
     * </pre>
     */
    public void pending(io.tickd.v1.PendingRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.PendingResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPendingMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * One pending timer's state and time remaining.
     * </pre>
     */
    public void get(io.tickd.v1.GetRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.GetResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Heartbeat: pushes a timer's deadline to now + its ttl (or the ttl given).
     * </pre>
     */
    public void touch(io.tickd.v1.TouchRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.TouchResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getTouchMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Heartbeats for many timers over one stream, each answered with its new deadline.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.tickd.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<io.tickd.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getKeepAliveMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * Expirations of a namespace as they fire.
     * </pre>
     */
    public void subscribe(io.tickd.v1.SubscribeRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SubscribeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getSubscribeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Acknowledges delivered expirations.
     * </pre>
     */
    public void ack(io.tickd.v1.AckRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.AckResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAckMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Moves a pending timer's next firing (and optionally replaces its payload).
     * </pre>
     */
    public void reschedule(io.tickd.v1.RescheduleRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RescheduleResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRescheduleMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Sends dead expirations back to delivery, their attempts counted afresh.
     * </pre>
     */
    public void redrive(io.tickd.v1.RedriveRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RedriveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRedriveMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class TimersBlockingStub extends io.grpc.stub.AbstractBlockingStub<TimersBlockingStub> {
    private TimersBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected TimersBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new TimersBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Registers one timer.
     * </pre>
     */
    public io.tickd.v1.NewTimeoutResponse newTimeout(io.tickd.v1.NewTimeoutRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNewTimeoutMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Registers a batch; one result per item, an invalid item fails alone.
     * </pre>
     */
    public io.tickd.v1.NewTimeoutsResponse newTimeouts(io.tickd.v1.NewTimeoutsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNewTimeoutsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Cancels a timer by id or key; says whether it was still pending.
     * </pre>
     */
    public io.tickd.v1.CancelResponse cancel(io.tickd.v1.CancelRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCancelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Counts pending timers and lists them a page at a time.
     * </pre>
     */
    public io.tickd.v1.PendingResponse pending(io.tickd.v1.PendingRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPendingMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * One pending timer's state and time remaining.
     * </pre>
     */
    public io.tickd.v1.GetResponse get(io.tickd.v1.GetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Heartbeat: pushes a timer's deadline to now + its ttl (or the ttl given).
     * </pre>
     */
    public io.tickd.v1.TouchResponse touch(io.tickd.v1.TouchRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getTouchMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Expirations of a namespace as they fire.
     * </pre>
     */
    public java.util.Iterator<io.tickd.v1.SubscribeResponse> subscribe(
        io.tickd.v1.SubscribeRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getSubscribeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Acknowledges delivered expirations.
     * </pre>
     */
    public io.tickd.v1.AckResponse ack(io.tickd.v1.AckRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAckMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Moves a pending timer's next firing (and optionally replaces its payload).
     * </pre>
     */
    public io.tickd.v1.RescheduleResponse reschedule(io.tickd.v1.RescheduleRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRescheduleMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Sends dead expirations back to delivery, their attempts counted afresh.
     * </pre>
     */
    public io.tickd.v1.RedriveResponse redrive(io.tickd.v1.RedriveRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRedriveMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class TimersFutureStub extends io.grpc.stub.AbstractFutureStub<TimersFutureStub> {
    private TimersFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected TimersFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new TimersFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Registers one timer.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.NewTimeoutResponse> newTimeout(
        io.tickd.v1.NewTimeoutRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNewTimeoutMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Registers a batch; one result per item, an invalid item fails alone.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.NewTimeoutsResponse> newTimeouts(
        io.tickd.v1.NewTimeoutsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNewTimeoutsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Cancels a timer by id or key; says whether it was still pending.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.CancelResponse> cancel(
        io.tickd.v1.CancelRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCancelMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Counts pending timers and lists them a page at a time.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.PendingResponse> pending(
        io.tickd.v1.PendingRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPendingMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * One pending timer's state and time remaining.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.GetResponse> get(
        io.tickd.v1.GetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Heartbeat: pushes a timer's deadline to now + its ttl (or the ttl given).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.TouchResponse> touch(
        io.tickd.v1.TouchRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getTouchMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Acknowledges delivered expirations.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.AckResponse> ack(
        io.tickd.v1.AckRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAckMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Moves a pending timer's next firing (and optionally replaces its payload).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.RescheduleResponse> reschedule(
        io.tickd.v1.RescheduleRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRescheduleMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Sends dead expirations back to delivery, their attempts counted afresh.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.RedriveResponse> redrive(
        io.tickd.v1.RedriveRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRedriveMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_NEW_TIMEOUT = 0;
  private static final int METHODID_NEW_TIMEOUTS = 1;
  private static final int METHODID_CANCEL = 2;
  private static final int METHODID_PENDING = 3;
  private static final int METHODID_GET = 4;
  private static final int METHODID_TOUCH = 5;
  private static final int METHODID_SUBSCRIBE = 6;
  private static final int METHODID_ACK = 7;
  private static final int METHODID_RESCHEDULE = 8;
  private static final int METHODID_REDRIVE = 9;
  private static final int METHODID_KEEP_ALIVE = 10;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final TimersImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(TimersImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_NEW_TIMEOUT:
          serviceImpl.newTimeout((io.tickd.v1.NewTimeoutRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutResponse>) responseObserver);
          break;
        case METHODID_NEW_TIMEOUTS:
          serviceImpl.newTimeouts((io.tickd.v1.NewTimeoutsRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.NewTimeoutsResponse>) responseObserver);
          break;
        case METHODID_CANCEL:
          serviceImpl.cancel((io.tickd.v1.CancelRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.CancelResponse>) responseObserver);
          break;
        case METHODID_PENDING:
          serviceImpl.pending((io.tickd.v1.PendingRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.PendingResponse>) responseObserver);
          break;
        case METHODID_GET:
          serviceImpl.get((io.tickd.v1.GetRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.GetResponse>) responseObserver);
          break;
        case METHODID_TOUCH:
          serviceImpl.touch((io.tickd.v1.TouchRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.TouchResponse>) responseObserver);
          break;
        case METHODID_SUBSCRIBE:
          serviceImpl.subscribe((io.tickd.v1.SubscribeRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.SubscribeResponse>) responseObserver);
          break;
        case METHODID_ACK:
          serviceImpl.ack((io.tickd.v1.AckRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.AckResponse>) responseObserver);
          break;
        case METHODID_RESCHEDULE:
          serviceImpl.reschedule((io.tickd.v1.RescheduleRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.RescheduleResponse>) responseObserver);
          break;
        case METHODID_REDRIVE:
          serviceImpl.redrive((io.tickd.v1.RedriveRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.RedriveResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_KEEP_ALIVE:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.keepAlive(
              (io.grpc.stub.StreamObserver<io.tickd.v1.KeepAliveResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class TimersBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    TimersBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.tickd.v1.TickdProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Timers");
    }
  }

  private static final class TimersFileDescriptorSupplier
      extends TimersBaseDescriptorSupplier {
    TimersFileDescriptorSupplier() {}
  }

  private static final class TimersMethodDescriptorSupplier
      extends TimersBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    TimersMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (TimersGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new TimersFileDescriptorSupplier())
              .addMethod(getNewTimeoutMethod())
              .addMethod(getNewTimeoutsMethod())
              .addMethod(getCancelMethod())
              .addMethod(getPendingMethod())
              .addMethod(getGetMethod())
              .addMethod(getTouchMethod())
              .addMethod(getKeepAliveMethod())
              .addMethod(getSubscribeMethod())
              .addMethod(getAckMethod())
              .addMethod(getRescheduleMethod())
              .addMethod(getRedriveMethod())
              .build();
        }
      }
    }
    return result;
  }
}
