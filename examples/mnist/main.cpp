// The program most LibTorch users start from: the shape of LibTorch's own
// MNIST example (a model as a plain object on the stack, passed around as
// Net&; train and test loops in template functions that take the loader by
// reference), with nansense wired in. The lines marked "nansense" are all the
// wiring there is: an include, start(), one batches() wrapper per loop, and
// close(). The loops themselves are unchanged: they take the wrapped loader
// where they took the loader.
//
// Reads MNIST-format files (train-images-idx3-ubyte, ... uncompressed) from
// --data-root with LibTorch's own torch::data::datasets::MNIST. Debian's
// dataset-fashion-mnist has them gzipped in /usr/share/datasets/fashion-mnist:
// gunzip copies of them into a folder and pass that.
#include <CLI/CLI.hpp>
#include <nansense/nansense.h>  // nansense
#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <string>

struct Net : torch::nn::Module {
  Net() : conv1(1, 10, /*kernel_size=*/5), conv2(10, 20, /*kernel_size=*/5), fc1(320, 50), fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader, torch::optim::Optimizer& optimizer,
           size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    AT_ASSERT(!std::isnan(loss.template item<float>()));
    loss.backward();
    optimizer.step();

    if (batch_idx++ % 10 == 0) {
      std::printf("\rTrain Epoch: %zu [%5zu/%5zu] Loss: %.4f", epoch, batch_idx * batch.data.size(0), dataset_size,
                  loss.template item<float>());
    }
  }
}

template <typename DataLoader>
void test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int32_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum).template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  test_loss /= dataset_size;
  std::printf("\nTest set: Average loss: %.4f | Accuracy: %.3f\n", test_loss,
              static_cast<double>(correct) / dataset_size);
}

int main(int argc, char** argv) {
  std::string data_root = "./data";
  int64_t train_batch_size = 64;
  int64_t test_batch_size = 1000;
  size_t epochs = 10;
  int port = 8080;
  CLI::App app{"LibTorch's MNIST example under the nansense debugger."};
  app.add_option("--data-root", data_root, "Folder with the uncompressed MNIST-format files")->capture_default_str();
  app.add_option("--epochs", epochs, "Training epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--port", port, "UI port (0 picks a free one)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(1);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  Net model;
  model.to(device);

  auto train_dataset = torch::data::datasets::MNIST(data_root)
                           .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(train_dataset),
                                                                                              train_batch_size);

  auto test_dataset = torch::data::datasets::MNIST(data_root, torch::data::datasets::MNIST::Mode::kTest)
                          .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                          .map(torch::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_dataset), test_batch_size);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  auto session = nansense::start(model, nansense::StartOptions()    // nansense
                                            .optimizer(&optimizer)  // nansense
                                            .port(port)             // nansense
                                            .input_mean({0.1307})   // nansense
                                            .input_std({0.3081}));  // nansense
  auto train_batches = session.batches(*train_loader, "train");     // nansense
  auto test_batches = session.batches(*test_loader, "test");        // nansense

  for (size_t epoch = 1; epoch <= epochs; ++epoch) {
    train(epoch, model, device, train_batches, optimizer, train_dataset_size);  // was *train_loader
    test(model, device, test_batches, test_dataset_size);                       // was *test_loader
  }
  session.close();  // nansense
  std::cout << "Training finished" << std::endl;
}
