// SPDX-License-Identifier: Apache-2.0
// test_kernel_choice.cpp — DASH_BWD_KERNEL: every value, including the refusals (no silent
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

Choice choose(const std::string& env) {
  Choice c{DASH_OK, BwdKernel::kMma, ""};
  c.status = select_backward_kernel(env, c.kernel, c.error);
  return c;
}

TEST(BwdKernelChoice, UnsetOrEmptySelectsTheWgmmaKernel) {
  const Choice c = choose("");
  EXPECT_EQ(c.status, DASH_OK);
  EXPECT_EQ(c.kernel, BwdKernel::kWgmma);
}

TEST(BwdKernelChoice, ExplicitValuesSelectTheirKernel) {
  const Choice mma = choose("mma");
  EXPECT_EQ(mma.status, DASH_OK);
  EXPECT_EQ(mma.kernel, BwdKernel::kMma);
  const Choice wgmma = choose("wgmma");
  EXPECT_EQ(wgmma.status, DASH_OK);
  EXPECT_EQ(wgmma.kernel, BwdKernel::kWgmma);
}

TEST(BwdKernelChoice, UnknownValuesAreErrorsNamingTheValue) {
  for (const std::string value : {"WGMMA", "mma ", "fa3", "1"}) {
    const Choice c = choose(value);
    EXPECT_EQ(c.status, DASH_ERROR_INVALID_ARGUMENT) << value;
    EXPECT_NE(c.error.find("DASH_BWD_KERNEL=" + value + ": unknown backward kernel"), std::string::npos) << c.error;
  }
}

}  // namespace
