package io.tickd.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: tickd/v1/sinks.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class SinksGrpc {

  private SinksGrpc() {}

  public static final String SERVICE_NAME = "tickd.v1.Sinks";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.SetSinkRequest,
      io.tickd.v1.SetSinkResponse> getSetSinkMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SetSink",
      requestType = io.tickd.v1.SetSinkRequest.class,
      responseType = io.tickd.v1.SetSinkResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.SetSinkRequest,
      io.tickd.v1.SetSinkResponse> getSetSinkMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.SetSinkRequest, io.tickd.v1.SetSinkResponse> getSetSinkMethod;
    if ((getSetSinkMethod = SinksGrpc.getSetSinkMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getSetSinkMethod = SinksGrpc.getSetSinkMethod) == null) {
          SinksGrpc.getSetSinkMethod = getSetSinkMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.SetSinkRequest, io.tickd.v1.SetSinkResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SetSink"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SetSinkRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SetSinkResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("SetSink"))
              .build();
        }
      }
    }
    return getSetSinkMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.GetSinkRequest,
      io.tickd.v1.GetSinkResponse> getGetSinkMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetSink",
      requestType = io.tickd.v1.GetSinkRequest.class,
      responseType = io.tickd.v1.GetSinkResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.GetSinkRequest,
      io.tickd.v1.GetSinkResponse> getGetSinkMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.GetSinkRequest, io.tickd.v1.GetSinkResponse> getGetSinkMethod;
    if ((getGetSinkMethod = SinksGrpc.getGetSinkMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getGetSinkMethod = SinksGrpc.getGetSinkMethod) == null) {
          SinksGrpc.getGetSinkMethod = getGetSinkMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.GetSinkRequest, io.tickd.v1.GetSinkResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetSink"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.GetSinkRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.GetSinkResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("GetSink"))
              .build();
        }
      }
    }
    return getGetSinkMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.RemoveSinkRequest,
      io.tickd.v1.RemoveSinkResponse> getRemoveSinkMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "RemoveSink",
      requestType = io.tickd.v1.RemoveSinkRequest.class,
      responseType = io.tickd.v1.RemoveSinkResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.RemoveSinkRequest,
      io.tickd.v1.RemoveSinkResponse> getRemoveSinkMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.RemoveSinkRequest, io.tickd.v1.RemoveSinkResponse> getRemoveSinkMethod;
    if ((getRemoveSinkMethod = SinksGrpc.getRemoveSinkMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getRemoveSinkMethod = SinksGrpc.getRemoveSinkMethod) == null) {
          SinksGrpc.getRemoveSinkMethod = getRemoveSinkMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.RemoveSinkRequest, io.tickd.v1.RemoveSinkResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "RemoveSink"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RemoveSinkRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.RemoveSinkResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("RemoveSink"))
              .build();
        }
      }
    }
    return getRemoveSinkMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.SinkStatusRequest,
      io.tickd.v1.SinkStatusResponse> getSinkStatusMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SinkStatus",
      requestType = io.tickd.v1.SinkStatusRequest.class,
      responseType = io.tickd.v1.SinkStatusResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.SinkStatusRequest,
      io.tickd.v1.SinkStatusResponse> getSinkStatusMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.SinkStatusRequest, io.tickd.v1.SinkStatusResponse> getSinkStatusMethod;
    if ((getSinkStatusMethod = SinksGrpc.getSinkStatusMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getSinkStatusMethod = SinksGrpc.getSinkStatusMethod) == null) {
          SinksGrpc.getSinkStatusMethod = getSinkStatusMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.SinkStatusRequest, io.tickd.v1.SinkStatusResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SinkStatus"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SinkStatusRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.SinkStatusResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("SinkStatus"))
              .build();
        }
      }
    }
    return getSinkStatusMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.PauseSinkRequest,
      io.tickd.v1.PauseSinkResponse> getPauseSinkMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "PauseSink",
      requestType = io.tickd.v1.PauseSinkRequest.class,
      responseType = io.tickd.v1.PauseSinkResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.PauseSinkRequest,
      io.tickd.v1.PauseSinkResponse> getPauseSinkMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.PauseSinkRequest, io.tickd.v1.PauseSinkResponse> getPauseSinkMethod;
    if ((getPauseSinkMethod = SinksGrpc.getPauseSinkMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getPauseSinkMethod = SinksGrpc.getPauseSinkMethod) == null) {
          SinksGrpc.getPauseSinkMethod = getPauseSinkMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.PauseSinkRequest, io.tickd.v1.PauseSinkResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "PauseSink"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.PauseSinkRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.PauseSinkResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("PauseSink"))
              .build();
        }
      }
    }
    return getPauseSinkMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.ResumeSinkRequest,
      io.tickd.v1.ResumeSinkResponse> getResumeSinkMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ResumeSink",
      requestType = io.tickd.v1.ResumeSinkRequest.class,
      responseType = io.tickd.v1.ResumeSinkResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.ResumeSinkRequest,
      io.tickd.v1.ResumeSinkResponse> getResumeSinkMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.ResumeSinkRequest, io.tickd.v1.ResumeSinkResponse> getResumeSinkMethod;
    if ((getResumeSinkMethod = SinksGrpc.getResumeSinkMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getResumeSinkMethod = SinksGrpc.getResumeSinkMethod) == null) {
          SinksGrpc.getResumeSinkMethod = getResumeSinkMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.ResumeSinkRequest, io.tickd.v1.ResumeSinkResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ResumeSink"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.ResumeSinkRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.ResumeSinkResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("ResumeSink"))
              .build();
        }
      }
    }
    return getResumeSinkMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.tickd.v1.ListSinksRequest,
      io.tickd.v1.ListSinksResponse> getListSinksMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListSinks",
      requestType = io.tickd.v1.ListSinksRequest.class,
      responseType = io.tickd.v1.ListSinksResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.tickd.v1.ListSinksRequest,
      io.tickd.v1.ListSinksResponse> getListSinksMethod() {
    io.grpc.MethodDescriptor<io.tickd.v1.ListSinksRequest, io.tickd.v1.ListSinksResponse> getListSinksMethod;
    if ((getListSinksMethod = SinksGrpc.getListSinksMethod) == null) {
      synchronized (SinksGrpc.class) {
        if ((getListSinksMethod = SinksGrpc.getListSinksMethod) == null) {
          SinksGrpc.getListSinksMethod = getListSinksMethod =
              io.grpc.MethodDescriptor.<io.tickd.v1.ListSinksRequest, io.tickd.v1.ListSinksResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListSinks"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.ListSinksRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.tickd.v1.ListSinksResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SinksMethodDescriptorSupplier("ListSinks"))
              .build();
        }
      }
    }
    return getListSinksMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static SinksStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SinksStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SinksStub>() {
        @java.lang.Override
        public SinksStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SinksStub(channel, callOptions);
        }
      };
    return SinksStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static SinksBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SinksBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SinksBlockingStub>() {
        @java.lang.Override
        public SinksBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SinksBlockingStub(channel, callOptions);
        }
      };
    return SinksBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static SinksFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SinksFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SinksFutureStub>() {
        @java.lang.Override
        public SinksFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SinksFutureStub(channel, callOptions);
        }
      };
    return SinksFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class SinksImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Sets a namespace's sink, or replaces its URL; durable once answered. Refused for a
     * namespace whose sink comes from `--sink`, and for a URL `--sink-allow` does not allow.
     * </pre>
     */
    public void setSink(io.tickd.v1.SetSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SetSinkResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSetSinkMethod(), responseObserver);
    }

    /**
     * <pre>
     * A namespace's sink, its URL's credentials masked; NOT_FOUND if it has none.
     * </pre>
     */
    public void getSink(io.tickd.v1.GetSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.GetSinkResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetSinkMethod(), responseObserver);
    }

    /**
     * <pre>
     * Removes a namespace's sink set through this API; its expirations then wait for
     * subscribers. NOT_FOUND if it has none.
     * </pre>
     */
    public void removeSink(io.tickd.v1.RemoveSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RemoveSinkResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRemoveSinkMethod(), responseObserver);
    }

    /**
     * <pre>
     * How one namespace's sink, or every sink the caller may see, is doing.
     * </pre>
     */
    public void sinkStatus(io.tickd.v1.SinkStatusRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SinkStatusResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSinkStatusMethod(), responseObserver);
    }

    /**
     * <pre>
     * Pauses a namespace's sink (one set by `--sink` too), durably: no push leaves until
     * ResumeSink, across restarts; its expirations wait in the namespace's buffer within its
     * bounds, spending no attempt. Answered once the pushes already under way have ended.
     * NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public void pauseSink(io.tickd.v1.PauseSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.PauseSinkResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPauseSinkMethod(), responseObserver);
    }

    /**
     * <pre>
     * Resumes a paused sink: what waited is pushed. NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public void resumeSink(io.tickd.v1.ResumeSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.ResumeSinkResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getResumeSinkMethod(), responseObserver);
    }

    /**
     * <pre>
     * Every sink the caller's token allows, by namespace: those of `--sink` and those kept
     * from SetSink (on any replica), their URLs' credentials masked.
     * </pre>
     */
    public void listSinks(io.tickd.v1.ListSinksRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.ListSinksResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListSinksMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getSetSinkMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.SetSinkRequest,
                io.tickd.v1.SetSinkResponse>(
                  this, METHODID_SET_SINK)))
          .addMethod(
            getGetSinkMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.GetSinkRequest,
                io.tickd.v1.GetSinkResponse>(
                  this, METHODID_GET_SINK)))
          .addMethod(
            getRemoveSinkMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.RemoveSinkRequest,
                io.tickd.v1.RemoveSinkResponse>(
                  this, METHODID_REMOVE_SINK)))
          .addMethod(
            getSinkStatusMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.SinkStatusRequest,
                io.tickd.v1.SinkStatusResponse>(
                  this, METHODID_SINK_STATUS)))
          .addMethod(
            getPauseSinkMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.PauseSinkRequest,
                io.tickd.v1.PauseSinkResponse>(
                  this, METHODID_PAUSE_SINK)))
          .addMethod(
            getResumeSinkMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.ResumeSinkRequest,
                io.tickd.v1.ResumeSinkResponse>(
                  this, METHODID_RESUME_SINK)))
          .addMethod(
            getListSinksMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.tickd.v1.ListSinksRequest,
                io.tickd.v1.ListSinksResponse>(
                  this, METHODID_LIST_SINKS)))
          .build();
    }
  }

  /**
   */
  public static final class SinksStub extends io.grpc.stub.AbstractAsyncStub<SinksStub> {
    private SinksStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SinksStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SinksStub(channel, callOptions);
    }

    /**
     * <pre>
     * Sets a namespace's sink, or replaces its URL; durable once answered. Refused for a
     * namespace whose sink comes from `--sink`, and for a URL `--sink-allow` does not allow.
     * </pre>
     */
    public void setSink(io.tickd.v1.SetSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SetSinkResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSetSinkMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * A namespace's sink, its URL's credentials masked; NOT_FOUND if it has none.
     * </pre>
     */
    public void getSink(io.tickd.v1.GetSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.GetSinkResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetSinkMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Removes a namespace's sink set through this API; its expirations then wait for
     * subscribers. NOT_FOUND if it has none.
     * </pre>
     */
    public void removeSink(io.tickd.v1.RemoveSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.RemoveSinkResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRemoveSinkMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * How one namespace's sink, or every sink the caller may see, is doing.
     * </pre>
     */
    public void sinkStatus(io.tickd.v1.SinkStatusRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.SinkStatusResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSinkStatusMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Pauses a namespace's sink (one set by `--sink` too), durably: no push leaves until
     * ResumeSink, across restarts; its expirations wait in the namespace's buffer within its
     * bounds, spending no attempt. Answered once the pushes already under way have ended.
     * NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public void pauseSink(io.tickd.v1.PauseSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.PauseSinkResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPauseSinkMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Resumes a paused sink: what waited is pushed. NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public void resumeSink(io.tickd.v1.ResumeSinkRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.ResumeSinkResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getResumeSinkMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Every sink the caller's token allows, by namespace: those of `--sink` and those kept
     * from SetSink (on any replica), their URLs' credentials masked.
     * </pre>
     */
    public void listSinks(io.tickd.v1.ListSinksRequest request,
        io.grpc.stub.StreamObserver<io.tickd.v1.ListSinksResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListSinksMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class SinksBlockingStub extends io.grpc.stub.AbstractBlockingStub<SinksBlockingStub> {
    private SinksBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SinksBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SinksBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Sets a namespace's sink, or replaces its URL; durable once answered. Refused for a
     * namespace whose sink comes from `--sink`, and for a URL `--sink-allow` does not allow.
     * </pre>
     */
    public io.tickd.v1.SetSinkResponse setSink(io.tickd.v1.SetSinkRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSetSinkMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * A namespace's sink, its URL's credentials masked; NOT_FOUND if it has none.
     * </pre>
     */
    public io.tickd.v1.GetSinkResponse getSink(io.tickd.v1.GetSinkRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetSinkMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Removes a namespace's sink set through this API; its expirations then wait for
     * subscribers. NOT_FOUND if it has none.
     * </pre>
     */
    public io.tickd.v1.RemoveSinkResponse removeSink(io.tickd.v1.RemoveSinkRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRemoveSinkMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * How one namespace's sink, or every sink the caller may see, is doing.
     * </pre>
     */
    public io.tickd.v1.SinkStatusResponse sinkStatus(io.tickd.v1.SinkStatusRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSinkStatusMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Pauses a namespace's sink (one set by `--sink` too), durably: no push leaves until
     * ResumeSink, across restarts; its expirations wait in the namespace's buffer within its
     * bounds, spending no attempt. Answered once the pushes already under way have ended.
     * NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public io.tickd.v1.PauseSinkResponse pauseSink(io.tickd.v1.PauseSinkRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPauseSinkMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Resumes a paused sink: what waited is pushed. NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public io.tickd.v1.ResumeSinkResponse resumeSink(io.tickd.v1.ResumeSinkRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getResumeSinkMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Every sink the caller's token allows, by namespace: those of `--sink` and those kept
     * from SetSink (on any replica), their URLs' credentials masked.
     * </pre>
     */
    public io.tickd.v1.ListSinksResponse listSinks(io.tickd.v1.ListSinksRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListSinksMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class SinksFutureStub extends io.grpc.stub.AbstractFutureStub<SinksFutureStub> {
    private SinksFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SinksFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SinksFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Sets a namespace's sink, or replaces its URL; durable once answered. Refused for a
     * namespace whose sink comes from `--sink`, and for a URL `--sink-allow` does not allow.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.SetSinkResponse> setSink(
        io.tickd.v1.SetSinkRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSetSinkMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * A namespace's sink, its URL's credentials masked; NOT_FOUND if it has none.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.GetSinkResponse> getSink(
        io.tickd.v1.GetSinkRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetSinkMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Removes a namespace's sink set through this API; its expirations then wait for
     * subscribers. NOT_FOUND if it has none.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.RemoveSinkResponse> removeSink(
        io.tickd.v1.RemoveSinkRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRemoveSinkMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * How one namespace's sink, or every sink the caller may see, is doing.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.SinkStatusResponse> sinkStatus(
        io.tickd.v1.SinkStatusRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSinkStatusMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Pauses a namespace's sink (one set by `--sink` too), durably: no push leaves until
     * ResumeSink, across restarts; its expirations wait in the namespace's buffer within its
     * bounds, spending no attempt. Answered once the pushes already under way have ended.
     * NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.PauseSinkResponse> pauseSink(
        io.tickd.v1.PauseSinkRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPauseSinkMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Resumes a paused sink: what waited is pushed. NOT_FOUND if the namespace has no sink.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.ResumeSinkResponse> resumeSink(
        io.tickd.v1.ResumeSinkRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getResumeSinkMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Every sink the caller's token allows, by namespace: those of `--sink` and those kept
     * from SetSink (on any replica), their URLs' credentials masked.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.tickd.v1.ListSinksResponse> listSinks(
        io.tickd.v1.ListSinksRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListSinksMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_SET_SINK = 0;
  private static final int METHODID_GET_SINK = 1;
  private static final int METHODID_REMOVE_SINK = 2;
  private static final int METHODID_SINK_STATUS = 3;
  private static final int METHODID_PAUSE_SINK = 4;
  private static final int METHODID_RESUME_SINK = 5;
  private static final int METHODID_LIST_SINKS = 6;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final SinksImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(SinksImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_SET_SINK:
          serviceImpl.setSink((io.tickd.v1.SetSinkRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.SetSinkResponse>) responseObserver);
          break;
        case METHODID_GET_SINK:
          serviceImpl.getSink((io.tickd.v1.GetSinkRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.GetSinkResponse>) responseObserver);
          break;
        case METHODID_REMOVE_SINK:
          serviceImpl.removeSink((io.tickd.v1.RemoveSinkRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.RemoveSinkResponse>) responseObserver);
          break;
        case METHODID_SINK_STATUS:
          serviceImpl.sinkStatus((io.tickd.v1.SinkStatusRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.SinkStatusResponse>) responseObserver);
          break;
        case METHODID_PAUSE_SINK:
          serviceImpl.pauseSink((io.tickd.v1.PauseSinkRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.PauseSinkResponse>) responseObserver);
          break;
        case METHODID_RESUME_SINK:
          serviceImpl.resumeSink((io.tickd.v1.ResumeSinkRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.ResumeSinkResponse>) responseObserver);
          break;
        case METHODID_LIST_SINKS:
          serviceImpl.listSinks((io.tickd.v1.ListSinksRequest) request,
              (io.grpc.stub.StreamObserver<io.tickd.v1.ListSinksResponse>) responseObserver);
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
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class SinksBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    SinksBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.tickd.v1.SinksProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Sinks");
    }
  }

  private static final class SinksFileDescriptorSupplier
      extends SinksBaseDescriptorSupplier {
    SinksFileDescriptorSupplier() {}
  }

  private static final class SinksMethodDescriptorSupplier
      extends SinksBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    SinksMethodDescriptorSupplier(String methodName) {
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
      synchronized (SinksGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new SinksFileDescriptorSupplier())
              .addMethod(getSetSinkMethod())
              .addMethod(getGetSinkMethod())
              .addMethod(getRemoveSinkMethod())
              .addMethod(getSinkStatusMethod())
              .addMethod(getPauseSinkMethod())
              .addMethod(getResumeSinkMethod())
              .addMethod(getListSinksMethod())
              .build();
        }
      }
    }
    return result;
  }
}
