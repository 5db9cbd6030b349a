//! Every refusal becomes a gRPC status here, in one place: the error's variant gives the
//! code, its text (which names the field or the limit) the message. A refusal of one item
//! of a call (a batch's item, a heartbeat) is answered inside the response as the same
//! code and message.

use tonic::Status;

use crate::domain::TimerError;
use crate::proto;

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

/// The refusal of one item, as a response carries it: its status's code and message.
pub(super) fn item_error(status: &Status) -> proto::Error {
    proto::Error {
        code: status.code() as i32,
        message: status.message().to_owned(),
    }
}
