//! gRPC's length-prefixed message framing (a compressed flag, a 4-byte length, the message),
//! written and read by both HTTP/2 clients: the tonic transport ([`super::h2_connection`]) and
//! the load's unary calls ([`super::unary_h2`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tonic::Status;

/// The largest response message accepted, as tonic's `max_decoding_message_size` elsewhere.
pub const MAX_MESSAGE: usize = 256 << 20;

/// The gRPC length-prefixed framing of one message.
pub fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).expect("a message under 4 GiB"));
    message
        .encode(&mut buf)
        .expect("the buffer has the message's length");
    buf.freeze()
}

/// The message inside exactly one uncompressed gRPC frame.
pub fn message_of(mut data: Bytes) -> Result<Bytes, Status> {
    if data.len() < 5 {
        return Err(Status::internal(format!(
            "a gRPC response of {} bytes (no message frame)",
            data.len()
        )));
    }
    let compressed = data.get_u8();
    let len = data.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::unimplemented("a compressed response message"));
    }
    if data.len() != len {
        return Err(Status::internal(format!(
            "a gRPC frame announcing {len} bytes carries {}",
            data.len()
        )));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_message_comes_back_whole_and_bad_frames_are_named() {
        let message = triton_proto::ModelInferRequest {
            model_name: "add_sub".into(),
            ..Default::default()
        };
        let framed = frame(&message);
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 9]);
        let back = message_of(framed.clone()).expect("one frame");
        assert_eq!(
            <triton_proto::ModelInferRequest as prost::Message>::decode(back).unwrap(),
            message
        );
        let short = message_of(framed.slice(..3)).unwrap_err();
        assert!(short.message().contains("3 bytes"), "{short:?}");
        let cut = message_of(framed.slice(..framed.len() - 1)).unwrap_err();
        assert_eq!(cut.message(), "a gRPC frame announcing 9 bytes carries 8");
        let mut compressed = BytesMut::from(&framed[..]);
        compressed[0] = 1;
        let compressed = message_of(compressed.freeze()).unwrap_err();
        assert_eq!(compressed.code(), tonic::Code::Unimplemented);
    }
}
