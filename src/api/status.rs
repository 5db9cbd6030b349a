//! Every refusal becomes a gRPC status here, in one place: the error's variant gives the
//! code, its text (which names the field or the limit) the message.

use tonic::Status;

use crate::domain::TimerError;

impl From<TimerError> for Status {
    fn from(error: TimerError) -> Self {
        let message = error.to_string();
        match error {
            TimerError::InvalidArgument { .. } => Status::invalid_argument(message),
            TimerError::NotFound(_) => Status::not_found(message),
            TimerError::ResourceExhausted(_) => Status::resource_exhausted(message),
            TimerError::FailedPrecondition(_) => Status::failed_precondition(message),
            TimerError::Unavailable(_) => Status::unavailable(message),
            TimerError::PermissionDenied(_) => Status::permission_denied(message),
        }
    }
}
