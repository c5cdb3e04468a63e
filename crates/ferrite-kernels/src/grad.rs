//! Backward kernels for training, float32: given a forward op's parameters, the
//! forward tensors it needs and the gradient of the loss with respect to its
//! output (`dy`), they write (overwrite, never accumulate) the gradients with
//! respect to its inputs and weights. Threaded on a [`crate::parallel::ThreadPool`]
//! and partitioned by output element, so results are bit-identical for any thread
//! count.

#[cfg(test)]
mod check;
pub mod conv;
pub mod matmul;
pub mod movement;
pub mod pool;
pub mod resize;
mod split;
