// SPDX-License-Identifier: Apache-2.0
// test_kernel_choice.cpp — DASH_BWD_KERNEL: every value and head dim, including the refusals (no silent
// fallback to another kernel, errors that name the variable and the value).
#include <string>

#include <gtest/gtest.h>

#include "bwd_kernel_choice.hpp"

namespace {

using dash::cuda::bwd::BwdKernel;
using dash::cuda::bwd::select_backward_kernel;

struct Choice {
  dash_status status;
  BwdKernel kernel;
  std::string error;
};

Choice choose(const std::string& env, int head_dim) {
  Choice c{DASH_OK, BwdKernel::kMma, ""};
  c.status = select_backward_kernel(env, head_dim, c.kernel, c.error);
  return c;
}

TEST(BwdKernelChoice, DefaultIsWgmmaForHeadDim128AndMmaOtherwise) {
  EXPECT_EQ(choose("", 128).status, DASH_OK);
  EXPECT_EQ(choose("", 128).kernel, BwdKernel::kWgmma);
  EXPECT_EQ(choose("", 64).status, DASH_OK);
  EXPECT_EQ(choose("", 64).kernel, BwdKernel::kMma);
}

TEST(BwdKernelChoice, MmaForcesTheMmaKernelForEveryHeadDim) {
  for (int head_dim : {64, 128}) {
    const Choice c = choose("mma", head_dim);
    EXPECT_EQ(c.status, DASH_OK);
    EXPECT_EQ(c.kernel, BwdKernel::kMma);
  }
}

TEST(BwdKernelChoice, WgmmaRunsHeadDim128AndRefusesOthers) {
  const Choice ok = choose("wgmma", 128);
  EXPECT_EQ(ok.status, DASH_OK);
  EXPECT_EQ(ok.kernel, BwdKernel::kWgmma);
  const Choice refused = choose("wgmma", 64);
  EXPECT_EQ(refused.status, DASH_ERROR_UNSUPPORTED);
  EXPECT_NE(refused.error.find("DASH_BWD_KERNEL=wgmma"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("head_dim 128 only (got 64)"), std::string::npos) << refused.error;
}

TEST(BwdKernelChoice, UnknownValuesAreErrorsNamingTheValue) {
  for (const std::string value : {"WGMMA", "mma ", "fa3", "1"}) {
    const Choice c = choose(value, 128);
    EXPECT_EQ(c.status, DASH_ERROR_INVALID_ARGUMENT) << value;
    EXPECT_NE(c.error.find("DASH_BWD_KERNEL=" + value + ": unknown backward kernel"), std::string::npos) << c.error;
  }
}

}  // namespace
